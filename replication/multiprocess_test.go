package replication

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// replicaEnv names the JSON file of a replicaSpec: a test binary started
// with it set runs that replica (TestMain dispatches) instead of the tests.
const replicaEnv = "FLEXKV_TEST_REPLICA"

// replicaSpec describes a replica to run in a child process.
type replicaSpec struct {
	Protocol multicast.Protocol
	Groups   []string // the topology: group names by rank
	Self     string   // this replica's group
	ID       string
	Members  []Member            // every replica of the group, this one included
	Peers    map[string][]string // gRPC addresses of the other groups' replicas, by group name
	Dir      string
}

// namedTopology returns the topology of the named groups, ranked in order.
func namedTopology(names []string) (*partition.Topology, error) {
	var spec partition.Spec
	for _, n := range names {
		spec.Groups = append(spec.Groups, partition.Group{Name: n})
	}
	return partition.NewTopology(spec)
}

func (s replicaSpec) config() (Config, error) {
	top, err := namedTopology(s.Groups)
	if err != nil {
		return Config{}, err
	}
	self, ok := top.Lookup(s.Self)
	if !ok {
		return Config{}, fmt.Errorf("replication: spec: unknown group %q", s.Self)
	}
	peers := make(map[partition.GroupID][]string, len(s.Peers))
	for name, addrs := range s.Peers {
		g, ok := top.Lookup(name)
		if !ok {
			return Config{}, fmt.Errorf("replication: spec: unknown peer group %q", name)
		}
		peers[g] = addrs
	}
	return Config{
		State:     group.Config{Protocol: s.Protocol, Topology: top, Self: self},
		ID:        s.ID,
		Members:   s.Members,
		Peers:     peers,
		Dir:       s.Dir,
		Bootstrap: true,
		NoSync:    false, // a child is killed for real: its raft log is synced
	}, nil
}

// replicaMain runs the replica of the spec at specPath in this process and
// returns the process's exit code.
func replicaMain(specPath string) int {
	if err := runReplica(specPath); err != nil {
		fmt.Fprintf(os.Stderr, "replica %s: %v\n", specPath, err)
		return 1
	}
	return 0
}

// runReplica opens the replica and reports on stdout, one line each:
// "ready" once it is open, "leader" and "follower" when its role changes,
// "delivered N" when its count of deliveries changes. SIGTERM closes it;
// the end of stdin (the test process is gone) stops it at once.
func runReplica(specPath string) error {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	b, err := os.ReadFile(specPath)
	if err != nil {
		return err
	}
	var spec replicaSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return err
	}
	cfg, err := spec.config()
	if err != nil {
		return err
	}
	rec, err := OpenRecorder(filepath.Join(spec.Dir, "recorder"))
	if err != nil {
		return err
	}
	cfg.Executor = rec
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	r, err := Open(cfg)
	if err != nil {
		return errors.Join(err, rec.Close())
	}
	self, _ := cfg.member(cfg.ID)
	peer, err := servePeer(r, self.GRPCAddr)
	if err != nil {
		return errors.Join(err, r.Close(), rec.Close())
	}
	orphaned := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(orphaned)
	}()
	report := func(line string) error {
		_, err := fmt.Fprintln(os.Stdout, line)
		return err
	}
	if err := report("ready"); err != nil {
		return err
	}
	poll := time.NewTicker(10 * time.Millisecond)
	defer poll.Stop()
	leader, delivered := false, int64(-1)
	for {
		select {
		case <-term:
			peer.stop()
			return errors.Join(r.Close(), rec.Close())
		case <-orphaned:
			return errors.New("stdin closed: the test process is gone")
		case <-poll.C:
			if l := r.IsLeader(); l != leader {
				leader = l
				role := "follower"
				if l {
					role = "leader"
				}
				if err := report(role); err != nil {
					return err
				}
			}
			if n := rec.Delivered(); n != delivered {
				delivered = n
				if err := report("delivered " + strconv.FormatInt(n, 10)); err != nil {
					return err
				}
			}
		}
	}
}

// childReplica is a replica running in a child process, as the test process
// sees it through the child's reports.
type childReplica struct {
	t      *testing.T
	name   string
	exe    string // the test binary
	spec   string // path of its replicaSpec
	dir    string // its data directory
	stderr string // file collecting its stderr across restarts

	// Of the running process, set by start and cleared by signal.
	cmd    *exec.Cmd
	stdin  *os.File      // write end of its stdin
	exited chan struct{} // closed once it exited and was reaped

	mu        sync.Mutex
	ready     bool
	leader    bool
	delivered int
	waitErr   error
}

func (p *childReplica) start() {
	p.t.Helper()
	if p.cmd != nil {
		p.t.Fatalf("%s is running already", p.name)
	}
	var files []*os.File // closed here: the child holds its own copies
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	inR, inW, err := os.Pipe()
	if err != nil {
		p.t.Fatal(err)
	}
	files = append(files, inR)
	outR, outW, err := os.Pipe()
	if err != nil {
		inW.Close()
		p.t.Fatal(err)
	}
	files = append(files, outW)
	errF, err := os.OpenFile(p.stderr, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		inW.Close()
		outR.Close()
		p.t.Fatal(err)
	}
	files = append(files, errF)
	// TestMain dispatches on the environment before flags are parsed;
	// -test.run=^$ keeps a binary without the dispatch from recursing.
	cmd := exec.Command(p.exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), replicaEnv+"="+p.spec)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, errF
	if err := cmd.Start(); err != nil {
		inW.Close()
		outR.Close()
		p.t.Fatalf("start %s: %v", p.name, err)
	}
	p.mu.Lock()
	p.ready, p.leader, p.delivered, p.waitErr = false, false, 0, nil
	p.mu.Unlock()
	p.cmd, p.stdin, p.exited = cmd, inW, make(chan struct{})
	go p.watch(cmd, outR, p.exited)
}

// watch reads the child's reports until it exits, then reaps it.
func (p *childReplica) watch(cmd *exec.Cmd, out *os.File, exited chan<- struct{}) {
	defer close(exited)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		switch line {
		case "ready":
			p.ready = true
		case "leader":
			p.leader = true
		case "follower":
			p.leader = false
		default:
			if n, ok := strings.CutPrefix(line, "delivered "); ok {
				if v, err := strconv.Atoi(n); err == nil {
					p.delivered = v
				}
			}
		}
		p.mu.Unlock()
	}
	out.Close()
	err := cmd.Wait()
	p.mu.Lock()
	p.ready, p.leader, p.waitErr = false, false, err
	p.mu.Unlock()
}

// signal sends sig to the child, waits until it exited and returns how it
// ended (cmd.Wait's error).
func (p *childReplica) signal(sig os.Signal) error {
	if p.cmd == nil {
		return nil
	}
	defer func() {
		p.stdin.Close()
		p.cmd, p.stdin = nil, nil
	}()
	_ = p.cmd.Process.Signal(sig) // fails only if it is gone already
	const exitMax = 10 * time.Second
	select {
	case <-p.exited:
	case <-time.After(exitMax):
		// SIGQUIT makes the Go runtime write every goroutine's stack to
		// stderr, which the test shows on failure.
		_ = p.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-p.exited:
		case <-time.After(exitMax):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
		return fmt.Errorf("%s still running %v after %v", p.name, exitMax, sig)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.waitErr
}

// dead reports whether a started child exited without being told to.
func (p *childReplica) dead() bool {
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *childReplica) status() (ready, leader bool, delivered int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.ready, p.leader, p.delivered
}

// stderrTail returns the end of everything the child wrote on stderr
// (room for a goroutine dump).
func (p *childReplica) stderrTail() string {
	b, err := os.ReadFile(p.stderr)
	switch {
	case err != nil:
		return err.Error()
	case len(b) == 0:
		return "(empty)"
	}
	const tailMax = 256 << 10
	if len(b) > tailMax {
		b = b[len(b)-tailMax:]
	}
	return string(b)
}

// loadMax bounds the load of TestMultiProcess: long enough for every wait
// of the test, so that only a hung multicast runs into it.
const loadMax = 5 * time.Minute

// waitCond polls cond until it returns "", failing the test with cond's
// last answer (what is still missing) after timeout.
func waitCond(t *testing.T, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing := cond()
		if missing == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", timeout, missing)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMultiProcess runs FlexCast on groups g0 and g1, three replicas each:
// g0 in this process, g1 as three child processes. Clients multicast to
// {g0} and {g0,g1} at g0, the lca, which forwards to g1 over gRPC. Under
// that load, g1's leader is killed with SIGKILL and restarted on the same
// directory and addresses, then a follower of g1 is. Once the load stops,
// every replica must deliver every acknowledged multicast addressed to its
// group, and the deliveries of all six replicas must pass the checker.
func TestMultiProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process cluster test")
	}
	if runtime.GOOS == "windows" {
		t.Skip("stops child processes with SIGTERM")
	}
	r := newMultiProcRig(t)
	r.waitReady()
	stopLoad := r.startLoad()
	// First g1's leader, then the follower that was not killed yet.
	r.flowing()
	first := r.waitLeader()
	r.crash(first)
	r.flowing()
	second := (first + 1) % len(r.procs)
	if second == r.waitLeader() {
		second = (first + 2) % len(r.procs)
	}
	r.crash(second)
	if err := stopLoad(); err != nil {
		t.Fatal(err)
	}
	total, toG1 := r.settle()
	r.readG1()
	if m := r.c.missing(); m != "" {
		t.Fatal(m)
	}
	t.Logf("%d multicasts acknowledged, %d of them to g1", total, toG1)
	r.c.check()
}

// multiProcRig is TestMultiProcess's cluster: group g0's replicas in this
// process (c.reps[g0]), group g1's as child processes (procs).
type multiProcRig struct {
	t       *testing.T
	c       *testCluster
	members [][]Member // by group
	procs   []*childReplica
}

// The groups of the rig.
const (
	mpG0 = partition.GroupID(0)
	mpG1 = partition.GroupID(1)
)

// newMultiProcRig starts g1's three child processes and g0's three replicas.
func newMultiProcRig(t *testing.T) *multiProcRig {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	const replicas = 3
	names := []string{"g0", "g1"}
	top, err := namedTopology(names)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := &multiProcRig{t: t, members: make([][]Member, len(names))}
	r.c = &testCluster{t: t, proto: protocol.FlexCast, top: top, dir: dir,
		peers: map[partition.GroupID][]string{}, accepted: map[multicast.MsgID]partition.GroupSet{}}
	for g := range names {
		for i := range replicas {
			m := Member{ID: fmt.Sprintf("r%d", i+1), RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
			m.PeerAddr = m.GRPCAddr // the tests serve the peer service beside the client API
			r.members[g] = append(r.members[g], m)
			r.c.peers[partition.GroupID(g)] = append(r.c.peers[partition.GroupID(g)], m.GRPCAddr)
		}
	}

	// g1: one child process per replica.
	r.procs = make([]*childReplica, replicas)
	t.Cleanup(func() {
		for _, p := range r.procs {
			if p == nil {
				continue
			}
			_ = p.signal(os.Kill)
			if t.Failed() {
				t.Logf("stderr of %s:\n%s", p.name, p.stderrTail())
			}
		}
	})
	for i, m := range r.members[mpG1] {
		spec := replicaSpec{
			Protocol: r.c.proto, Groups: names, Self: "g1", ID: m.ID, Members: r.members[mpG1],
			Peers: map[string][]string{"g0": r.c.peers[mpG0]},
			Dir:   filepath.Join(dir, "g1-"+m.ID),
		}
		b, err := json.MarshalIndent(spec, "", "\t")
		if err != nil {
			t.Fatal(err)
		}
		p := &childReplica{t: t, name: "g1 " + m.ID, exe: exe, dir: spec.Dir,
			spec: filepath.Join(dir, "g1-"+m.ID+".json"), stderr: filepath.Join(dir, "g1-"+m.ID+".stderr")}
		if err := os.WriteFile(p.spec, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r.procs[i] = p
		p.start()
	}

	// g0: in this process.
	r.c.reps = [][]*testReplica{nil}
	for i, m := range r.members[mpG0] {
		r.c.reps[mpG0] = append(r.c.reps[mpG0], &testReplica{cfg: Config{
			State:     group.Config{Protocol: r.c.proto, Topology: top, Self: mpG0},
			ID:        m.ID,
			Members:   r.members[mpG0],
			Peers:     map[partition.GroupID][]string{mpG1: r.c.peers[mpG1]},
			Dir:       filepath.Join(dir, "g0-"+m.ID),
			Bootstrap: true,
			NoSync:    true,
		}})
		r.c.start(int(mpG0), i)
	}
	t.Cleanup(r.c.stopAll)
	return r
}

// alive fails the test if a child died on its own.
func (r *multiProcRig) alive() {
	r.t.Helper()
	for _, p := range r.procs {
		if p.dead() {
			r.t.Fatalf("%s exited: %v (its stderr follows)", p.name, p.signal(os.Kill))
		}
	}
}

// leaderOf returns the child that reports leading g1, or -1.
func (r *multiProcRig) leaderOf() int {
	for i, p := range r.procs {
		if ready, leader, _ := p.status(); ready && leader {
			return i
		}
	}
	return -1
}

// delivered returns the most deliveries any g1 child reported, but for
// the child skip (-1: none skipped).
func (r *multiProcRig) delivered(skip int) int {
	most := 0
	for i, p := range r.procs {
		if _, _, n := p.status(); i != skip {
			most = max(most, n)
		}
	}
	return most
}

// waitReady waits until every child is ready.
func (r *multiProcRig) waitReady() {
	r.t.Helper()
	waitCond(r.t, 15*time.Second, func() string {
		r.alive()
		for _, p := range r.procs {
			if ready, _, _ := p.status(); !ready {
				return p.name + " is not ready"
			}
		}
		return ""
	})
}

// startLoad starts the clients, which multicast to {g0} or {g0,g1} until
// the returned function stops them, between two multicasts, never in the
// middle of one, so that every multicast that may be delivered is
// acknowledged; it returns the first error of a multicast.
//
// The load's context must outlast every wait that the load spans (two
// flowing, two waitLeader and two crash, 15s per wait: 2 minutes at most),
// with room for a slow machine running -race, whose children fsync: a
// multicast that fails on it fails the test.
func (r *multiProcRig) startLoad() (stop func() error) {
	ctx, cancel := context.WithTimeout(context.Background(), loadMax)
	const clients = 4
	done := make(chan struct{})
	var wg sync.WaitGroup
	loadErrs := make(chan error, clients)
	for cl := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(6, uint64(cl)))
			for {
				select {
				case <-done:
					return
				default:
				}
				dst := partition.SetOf(mpG0)
				if rng.IntN(2) == 0 {
					dst = dst.Add(mpG1)
				}
				if err := r.c.multicast(ctx, uint64(cl+1), dst); err != nil {
					loadErrs <- err
					return
				}
			}
		})
	}
	var stopped sync.Once
	stop = func() error {
		var err error
		stopped.Do(func() {
			close(done)
			wg.Wait()
			cancel()
			close(loadErrs)
			err = <-loadErrs
		})
		return err
	}
	// A test that fails midway stops the clients at once, in the middle of
	// their multicasts.
	r.t.Cleanup(func() {
		cancel()
		_ = stop()
	})
	return stop
}

// progressMin is how many more multicasts g1 delivers in each wait for
// progress.
const progressMin = 50

// crash kills procs[victim] with SIGKILL, waits until the others elect a
// leader among them and deliver progressMin more multicasts than any g1
// replica had delivered, restarts it and waits until it caught up.
func (r *multiProcRig) crash(victim int) {
	r.t.Helper()
	p := r.procs[victim]
	_, wasLeader, _ := p.status()
	base := r.delivered(-1)
	if err := p.signal(os.Kill); err == nil {
		r.t.Fatalf("%s exited cleanly after SIGKILL", p.name)
	}
	r.t.Logf("killed %s (leader %v) at %d deliveries", p.name, wasLeader, base)
	waitCond(r.t, 15*time.Second, func() string {
		r.alive()
		if l := r.leaderOf(); l < 0 || l == victim {
			return "g1 elects no leader without " + p.name
		}
		for i, q := range r.procs {
			if _, _, n := q.status(); i != victim && n < base+progressMin {
				return fmt.Sprintf("%s delivered %d, want %d", q.name, n, base+progressMin)
			}
		}
		return ""
	})
	target := r.delivered(victim)
	p.start()
	waitCond(r.t, 15*time.Second, func() string {
		r.alive()
		if ready, _, n := p.status(); !ready || n < target {
			return fmt.Sprintf("restarted %s: ready %v, delivered %d, want %d", p.name, ready, n, target)
		}
		return ""
	})
	r.t.Logf("restarted %s caught up to %d deliveries", p.name, target)
}

// waitLeader returns the child leading g1, waiting for one.
func (r *multiProcRig) waitLeader() int {
	r.t.Helper()
	l := -1
	waitCond(r.t, 15*time.Second, func() string {
		r.alive()
		if l = r.leaderOf(); l < 0 {
			return "g1 has no leader"
		}
		return ""
	})
	return l
}

// flowing waits until g1 delivers multicasts, so that each crash
// interrupts a stream of them.
func (r *multiProcRig) flowing() {
	r.t.Helper()
	base := r.delivered(-1)
	waitCond(r.t, 15*time.Second, func() string {
		r.alive()
		for _, p := range r.procs {
			if _, _, n := p.status(); n < base+progressMin {
				return fmt.Sprintf("%s delivered %d, want %d", p.name, n, base+progressMin)
			}
		}
		return ""
	})
}

// settle waits until g0 delivered everything, its channel to g1 is fully
// acknowledged, and every g1 replica reports as many deliveries as there
// were acknowledged multicasts to g1 (which ones they are is checked from
// the stores); it returns the multicasts acknowledged, and those to g1.
func (r *multiProcRig) settle() (total, toG1 int) {
	r.t.Helper()
	c := r.c
	c.mu.Lock()
	total = len(c.accepted)
	for _, dst := range c.accepted {
		if dst.Has(mpG1) {
			toG1++
		}
	}
	c.mu.Unlock()
	waitCond(r.t, 20*time.Second, func() string {
		r.alive()
		if m := c.missing(); m != "" {
			return m
		}
		outbox := -1
		for _, tr := range c.reps[mpG0] {
			if tr.r.IsLeader() {
				tr.r.State(func(s *group.State) { outbox = s.Node().OutboxLen(mpG1) })
			}
		}
		if outbox != 0 {
			return fmt.Sprintf("g0's leader has %d unacknowledged envelopes to g1 (-1: no leader)", outbox)
		}
		for _, p := range r.procs {
			if _, _, n := p.status(); n < toG1 {
				return fmt.Sprintf("%s delivered %d of %d", p.name, n, toG1)
			}
		}
		return ""
	})
	return total, toG1
}

// readG1 stops g1 cleanly and opens its replicas' stores here, as the
// cluster's g1 replicas.
func (r *multiProcRig) readG1() {
	r.t.Helper()
	r.c.reps = append(r.c.reps, nil)
	for i, p := range r.procs {
		if err := p.signal(syscall.SIGTERM); err != nil {
			r.t.Fatalf("%s after SIGTERM: %v\n%s", p.name, err, p.stderrTail())
		}
		rec, err := OpenRecorder(filepath.Join(p.dir, "recorder"))
		if err != nil {
			r.t.Fatal(err)
		}
		r.t.Cleanup(func() {
			if err := rec.Close(); err != nil {
				r.t.Error(err)
			}
		})
		r.c.reps[mpG1] = append(r.c.reps[mpG1], &testReplica{cfg: Config{ID: r.members[mpG1][i].ID}, rec: rec})
	}
}
