package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/partition"
)

// asFlexkvEnv, set to 1, makes the test binary run as `flexkv` (TestMain):
// the replicas of the tests below are real processes of it.
const asFlexkvEnv = "FLEXKV_TEST_AS_FLEXKV"

// serverProc is one `flexkv server` process.
type serverProc struct {
	id   string
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// startServer starts `flexkv server` with args, its output in dir/ID.log.
func startServer(t *testing.T, dir, id string, args ...string) *serverProc {
	t.Helper()
	log, err := os.Create(filepath.Join(dir, id+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append([]string{"server", "--node", id, "--data-dir", filepath.Join(dir, id), "--log-level", "info"}, args...)...)
	cmd.Env = append(os.Environ(), asFlexkvEnv+"=1", "GOGC=100")
	// A test binary killed by its timeout leaves no server behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serverProc{id: id, cmd: cmd, done: make(chan struct{}), log: log}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		log.Close()
	})
	return p
}

// stop sends SIGTERM, and SIGKILL after 10s, and waits for the end.
func (p *serverProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stopAll stops every process of procs at once.
func stopAll(procs map[string]*serverProc) {
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Go(p.stop)
	}
	wg.Wait()
}

// tailOf returns the last lines of a replica's log, for a failure.
func tailOf(dir, id string) string {
	data, _ := os.ReadFile(filepath.Join(dir, id+".log"))
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	return strings.Join(lines[max(0, len(lines)-15):], "\n")
}

// copyCerts copies the test certificates (TestMain's) into a directory of
// the test's own, with the CA's key beside it, and returns both paths.
func copyCerts(t *testing.T) (certsDir, caKey string) {
	t.Helper()
	src := os.Getenv("FLEXKV_CERTS_DIR")
	certsDir, caKey = filepath.Join(t.TempDir(), "certs"), filepath.Join(filepath.Dir(src), "ca.key")
	if err := os.MkdirAll(certsDir, 0o700); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(certsDir, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return certsDir, caKey
}

// TestReplaceReplicaUnderLoad replaces a replica and moves a partition on
// real processes while the gTPC-C whole mix runs (DESIGN 14): nine `flexkv
// server` processes; SIGKILL r2 for good; `member add` r10, started with
// `--join`; `member promote --wait`; `member remove r2`; `partition move
// w0003 --to eu-west-1 --wait`. The clients see no error, and the TPC-C
// checks pass.
func TestReplaceReplicaUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("nine server processes and a 30s gTPC-C run")
	}
	dir := t.TempDir()
	began := time.Now()
	step := func(what string) { t.Logf("%5.1fs %s", time.Since(began).Seconds(), what) }
	certsDir, caKey := copyCerts(t)
	t.Setenv("FLEXKV_CERTS_DIR", certsDir)
	cfg := testcluster.Layout(t, "flexcast", testaddr.Command)
	path := configFile(t, cfg)
	procs := map[string]*serverProc{}
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			procs[r.ID] = startServer(t, dir, r.ID, "--config", path, "--certs-dir", certsDir)
		}
	}
	defer stopAll(procs)
	waitStatus(t, path, dir, 9)
	step("nine replicas serve")
	if code, _, stderr := runCmd(t, newRootCmd(), "gtpcc", "load", "--config", path); code != 0 {
		t.Fatalf("gtpcc load: exit %d: %s", code, stderr)
	}
	step("loaded")

	// The whole mix, for 30s, while the replica is replaced.
	type result struct {
		code        int
		out, errOut string
	}
	ran := make(chan result, 1)
	go func() {
		code, out, errOut := runCmd(t, newRootCmd(), "gtpcc", "run", "--config", path, "--duration", "30s", "--progress", "1s")
		ran <- result{code, out, errOut}
	}()
	time.Sleep(5 * time.Second)
	if err := procs["r2"].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-procs["r2"].done
	step("r2 killed")

	// The new member's certificate, made before it joins.
	r10 := partition.ReplicaConfig{ID: "r10", Raft: freeAddr(t), GRPC: freeAddr(t), Peer: freeAddr(t)}
	if code, _, stderr := runCmd(t, newRootCmd(), "cert", "create-node", "r10", "127.0.0.1", "--group", "eu-west-1", "--config", path, "--certs-dir", certsDir, "--ca-key", caKey); code != 0 {
		t.Fatalf("cert create-node --group: exit %d: %s", code, stderr)
	}
	if _, err := certs.LoadNode(certsDir, "r10"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	code, out, stderr := runCmd(t, newRootCmd(), "member", "add", "eu-west-1", "r10", "--raft", r10.Raft, "--grpc", r10.GRPC, "--peer", r10.Peer, "--config", path, "--json")
	if code != 0 {
		t.Fatalf("member add: exit %d: %s", code, stderr)
	}
	var added struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := json.Unmarshal([]byte(out), &added); err != nil || added.Epoch != 2 {
		t.Errorf("member add --json: %q (%v), want epoch 2", out, err)
	}
	procs["r10"] = startServer(t, dir, "r10", "--join", cfg.Groups[0].Replicas[0].GRPC, "--initial-cluster-state", "existing", "--certs-dir", certsDir)
	code, out, stderr = runCmd(t, newRootCmd(), "member", "promote", "eu-west-1", "r10", "--wait", "--timeout", "2m", "--config", path)
	if code != 0 {
		t.Fatalf("member promote --wait: exit %d: %s%s\nr10:\n%s", code, out, stderr, tailOf(dir, "r10"))
	}
	promoted := time.Since(start)
	t.Logf("member add to promoted voter: %.1fs (%s)", promoted.Seconds(), strings.TrimSpace(out))
	if code, out, stderr := runCmd(t, newRootCmd(), "member", "remove", "eu-west-1", "r2", "--config", path); code != 0 {
		t.Fatalf("member remove: exit %d: %s%s", code, out, stderr)
	}
	step("r2 removed")
	// And a warehouse of eu-west-3 moves to eu-west-1 (DESIGN 14), under
	// the same load, to a group whose members just changed.
	start = time.Now()
	if code, out, stderr := runCmd(t, newRootCmd(), "partition", "move", "w0003", "--to", "eu-west-1", "--wait", "--timeout", "2m", "--config", path); code != 0 {
		t.Fatalf("partition move --wait: exit %d: %s%s", code, out, stderr)
	}
	t.Logf("partition move w0003 to eu-west-1: %.1fs", time.Since(start).Seconds())
	step("w0003 moved")
	var res result
	select {
	case res = <-ran:
	case <-time.After(4 * time.Minute):
		t.Fatalf("gtpcc run: no end within 4 minutes of a 30s run\nr1:\n%s\nr10:\n%s", tailOf(dir, "r1"), tailOf(dir, "r10"))
	}
	step("gtpcc run and check done")
	if res.code != 0 || !strings.Contains(res.out, " 0 errors") || !strings.Contains(res.out, "check: passed") {
		t.Fatalf("gtpcc run: exit %d, want 0 with no error and the checks passed:\n%s\n%s", res.code, res.out, res.errOut)
	}
	t.Logf("gtpcc run during the replacement:\n%s", res.out)

	// The group's members: r1, r3 and r10, voters; r2 gone; two changes
	// more for the move, whose partition eu-west-1 owns.
	checkMembers(t, path, "eu-west-1", 5, "r1:voter r3:voter r10:voter")
	if owner := partitionOwner(t, path, "w0003"); owner.Group != "eu-west-1" || owner.MovingTo != "" {
		t.Errorf("partition list after the move: %+v, want w0003 at eu-west-1", owner)
	}
}

// checkMembers checks, with flexkv member list --json, that every member
// is at epoch and that group's are want ("id:suffrage ...").
func checkMembers(t *testing.T, path, group string, epoch uint64, want string) {
	t.Helper()
	code, out, stderr := runCmd(t, newRootCmd(), "member", "list", "--config", path, "--json")
	if code != 0 {
		t.Fatalf("member list: exit %d: %s%s", code, out, stderr)
	}
	var got []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var r memberRow
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("member list --json line %q: %v", sc.Text(), err)
		}
		if r.Epoch != epoch {
			t.Errorf("member list: %s at epoch %d, want %d", r.Member, r.Epoch, epoch)
		}
		if r.Group == group {
			got = append(got, fmt.Sprintf("%s:%s", r.Member, r.Suffrage))
		}
	}
	if g := strings.Join(got, " "); g != want {
		t.Errorf("%s's members %q, want %q", group, g, want)
	}
}

// waitStatus waits until n replicas of the configuration at path answer
// flexkv status.
func waitStatus(t *testing.T, path, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, out, _ := runCmd(t, newRootCmd(), "status", "--config", path, "--timeout", "2s")
		if code == 0 && strings.Count(out, "leader") == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster did not start within 60s: status exit %d:\n%s\nr1:\n%s", code, out, tailOf(dir, "r1"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// TestCheckRemove: removing a voter is refused when it is the group's last
// or when the voters left that answer are not a quorum of the voters left;
// a learner, or a voter whose removal keeps a quorum, may go.
func TestCheckRemove(t *testing.T) {
	voter := func(id string) *apipb.RaftMember { return &apipb.RaftMember{Id: id, Suffrage: "voter"} }
	learner := func(id string) *apipb.RaftMember { return &apipb.RaftMember{Id: id, Suffrage: "learner"} }
	state := func(up []string, raft ...*apipb.RaftMember) *groupState {
		st := &groupState{name: "g", leader: up[0], status: map[string]*apipb.StatusResponse{}, raft: map[string]*apipb.RaftMember{}, raftList: raft}
		for _, id := range up {
			st.status[id] = &apipb.StatusResponse{}
		}
		for _, m := range raft {
			st.raft[m.GetId()] = m
		}
		return st
	}
	for _, tc := range []struct {
		name string
		st   *groupState
		id   string
		want string // "" when allowed
	}{
		{"dead voter of four", state([]string{"r1", "r3", "r10"}, voter("r1"), voter("r2"), voter("r3"), voter("r10")), "r2", ""},
		{"live voter, another dead", state([]string{"r1", "r3"}, voter("r1"), voter("r2"), voter("r3")), "r3", "loses its quorum"},
		{"learner", state([]string{"r1"}, voter("r1"), learner("r10")), "r10", ""},
		{"last voter", state([]string{"r1", "r10"}, voter("r1"), learner("r10")), "r1", "last voter"},
		{"not in raft yet", state([]string{"r1"}, voter("r1")), "r10", ""},
	} {
		err := tc.st.checkRemove(tc.id)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want allowed", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if err := (&groupState{name: "g"}).checkRemove("r1"); err == nil || !strings.Contains(err.Error(), "no leader") {
		t.Errorf("without a leader: %v, want refused", err)
	}
}
