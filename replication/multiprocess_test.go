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
	g0, g1 := partition.GroupID(0), partition.GroupID(1)
	dir := t.TempDir()
	c := &testCluster{t: t, proto: protocol.FlexCast, top: top, dir: dir,
		peers: map[partition.GroupID][]string{}, accepted: map[multicast.MsgID]partition.GroupSet{}}
	members := make([][]Member, len(names))
	for g := range names {
		for i := range replicas {
			m := Member{ID: fmt.Sprintf("r%d", i+1), RaftAddr: freeAddr(t), GRPCAddr: freeAddr(t)}
			m.PeerAddr = m.GRPCAddr // the tests serve the peer service beside the client API
			members[g] = append(members[g], m)
			c.peers[partition.GroupID(g)] = append(c.peers[partition.GroupID(g)], m.GRPCAddr)
		}
	}

	// g1: one child process per replica.
	procs := make([]*childReplica, replicas)
	t.Cleanup(func() {
		for _, p := range procs {
			if p == nil {
				continue
			}
			_ = p.signal(os.Kill)
			if t.Failed() {
				t.Logf("stderr of %s:\n%s", p.name, p.stderrTail())
			}
		}
	})
	for i, m := range members[g1] {
		spec := replicaSpec{
			Protocol: c.proto, Groups: names, Self: "g1", ID: m.ID, Members: members[g1],
			Peers: map[string][]string{"g0": c.peers[g0]},
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
		procs[i] = p
		p.start()
	}

	// g0: in this process.
	c.reps = [][]*testReplica{nil}
	for i, m := range members[g0] {
		c.reps[g0] = append(c.reps[g0], &testReplica{cfg: Config{
			State:     group.Config{Protocol: c.proto, Topology: top, Self: g0},
			ID:        m.ID,
			Members:   members[g0],
			Peers:     map[partition.GroupID][]string{g1: c.peers[g1]},
			Dir:       filepath.Join(dir, "g0-"+m.ID),
			Bootstrap: true,
			NoSync:    true,
		}})
		c.start(int(g0), i)
	}
	t.Cleanup(c.stopAll)

	// alive fails the test if a child died on its own.
	alive := func() {
		t.Helper()
		for _, p := range procs {
			if p.dead() {
				t.Fatalf("%s exited: %v (its stderr follows)", p.name, p.signal(os.Kill))
			}
		}
	}
	// leaderOf returns the child that reports leading g1, or -1.
	leaderOf := func() int {
		for i, p := range procs {
			if ready, leader, _ := p.status(); ready && leader {
				return i
			}
		}
		return -1
	}
	waitCond(t, 15*time.Second, func() string {
		alive()
		for _, p := range procs {
			if ready, _, _ := p.status(); !ready {
				return p.name + " is not ready"
			}
		}
		return ""
	})

	// The load: clients multicast to {g0} or {g0,g1} until told to stop.
	// They are stopped between two multicasts, never in the middle of one,
	// so that every multicast that may be delivered is acknowledged.
	// The load's context must outlast every wait below that the load spans
	// (two flowing, two waitLeader and two crash, 15s per wait: 2 minutes
	// at most), with room for a slow machine running -race, whose children
	// fsync: a multicast that fails on it fails the test.
	ctx, cancel := context.WithTimeout(context.Background(), loadMax)
	defer cancel()
	const clients = 4
	stop := make(chan struct{})
	var wg sync.WaitGroup
	loadErrs := make(chan error, clients)
	for cl := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(6, uint64(cl)))
			for {
				select {
				case <-stop:
					return
				default:
				}
				dst := partition.SetOf(g0)
				if rng.IntN(2) == 0 {
					dst = dst.Add(g1)
				}
				if err := c.multicast(ctx, uint64(cl+1), dst); err != nil {
					loadErrs <- err
					return
				}
			}
		})
	}
	var stopped sync.Once
	stopLoad := func() {
		stopped.Do(func() { close(stop) })
		wg.Wait()
	}
	t.Cleanup(stopLoad)

	// crash kills procs[victim] with SIGKILL, waits until the others elect a
	// leader among them and deliver progressMin more multicasts than any g1
	// replica had delivered, restarts it and waits until it caught up.
	const progressMin = 50
	crash := func(victim int) {
		t.Helper()
		p := procs[victim]
		_, wasLeader, _ := p.status()
		base := 0
		for _, q := range procs {
			_, _, n := q.status()
			base = max(base, n)
		}
		if err := p.signal(os.Kill); err == nil {
			t.Fatalf("%s exited cleanly after SIGKILL", p.name)
		}
		t.Logf("killed %s (leader %v) at %d deliveries", p.name, wasLeader, base)
		waitCond(t, 15*time.Second, func() string {
			alive()
			if l := leaderOf(); l < 0 || l == victim {
				return "g1 elects no leader without " + p.name
			}
			for i, q := range procs {
				if _, _, n := q.status(); i != victim && n < base+progressMin {
					return fmt.Sprintf("%s delivered %d, want %d", q.name, n, base+progressMin)
				}
			}
			return ""
		})
		target := 0
		for i, q := range procs {
			if _, _, n := q.status(); i != victim {
				target = max(target, n)
			}
		}
		p.start()
		waitCond(t, 15*time.Second, func() string {
			alive()
			if ready, _, n := p.status(); !ready || n < target {
				return fmt.Sprintf("restarted %s: ready %v, delivered %d, want %d", p.name, ready, n, target)
			}
			return ""
		})
		t.Logf("restarted %s caught up to %d deliveries", p.name, target)
	}

	// waitLeader returns the child leading g1, waiting for one.
	waitLeader := func() int {
		t.Helper()
		l := -1
		waitCond(t, 15*time.Second, func() string {
			alive()
			if l = leaderOf(); l < 0 {
				return "g1 has no leader"
			}
			return ""
		})
		return l
	}
	// flowing waits until g1 delivers multicasts, so that each crash
	// interrupts a stream of them.
	flowing := func() {
		t.Helper()
		base := 0
		for _, p := range procs {
			_, _, n := p.status()
			base = max(base, n)
		}
		waitCond(t, 15*time.Second, func() string {
			alive()
			for _, p := range procs {
				if _, _, n := p.status(); n < base+progressMin {
					return fmt.Sprintf("%s delivered %d, want %d", p.name, n, base+progressMin)
				}
			}
			return ""
		})
	}
	// First g1's leader, then the follower that was not killed yet.
	flowing()
	first := waitLeader()
	crash(first)
	flowing()
	second := (first + 1) % replicas
	if second == waitLeader() {
		second = (first + 2) % replicas
	}
	crash(second)

	stopLoad()
	close(loadErrs)
	if err := <-loadErrs; err != nil {
		t.Fatal(err)
	}

	// Settle: g0 delivered everything, its channel to g1 is fully
	// acknowledged, and every g1 replica reports as many deliveries as there
	// were acknowledged multicasts to g1. Which ones they are is checked
	// below, from the stores.
	c.mu.Lock()
	total, toG1 := len(c.accepted), 0
	for _, dst := range c.accepted {
		if dst.Has(g1) {
			toG1++
		}
	}
	c.mu.Unlock()
	waitCond(t, 20*time.Second, func() string {
		alive()
		if m := c.missing(); m != "" {
			return m
		}
		outbox := -1
		for _, tr := range c.reps[g0] {
			if tr.r.IsLeader() {
				tr.r.State(func(s *group.State) { outbox = s.Node().OutboxLen(g1) })
			}
		}
		if outbox != 0 {
			return fmt.Sprintf("g0's leader has %d unacknowledged envelopes to g1 (-1: no leader)", outbox)
		}
		for _, p := range procs {
			if _, _, n := p.status(); n < toG1 {
				return fmt.Sprintf("%s delivered %d of %d", p.name, n, toG1)
			}
		}
		return ""
	})

	// Stop g1 cleanly and read its replicas' stores from here.
	c.reps = append(c.reps, nil)
	for i, p := range procs {
		if err := p.signal(syscall.SIGTERM); err != nil {
			t.Fatalf("%s after SIGTERM: %v\n%s", p.name, err, p.stderrTail())
		}
		rec, err := OpenRecorder(filepath.Join(p.dir, "recorder"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := rec.Close(); err != nil {
				t.Error(err)
			}
		})
		c.reps[g1] = append(c.reps[g1], &testReplica{cfg: Config{ID: members[g1][i].ID}, rec: rec})
	}
	if m := c.missing(); m != "" {
		t.Fatal(m)
	}
	t.Logf("%d multicasts acknowledged, %d of them to g1", total, toG1)
	c.check()
}
