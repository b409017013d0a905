package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// epochChanges is how many changes of the epoch TestEpochChangesUnderLoad
// makes while the transfers run.
const epochChanges = 10

// TestEpochChangesUnderLoad changes the epoch of a running cluster (TLS on)
// ten times while concurrent transfers run, five of them changing the
// overlay (ranks, and the tree under the tree protocol), under each
// protocol (DESIGN 14): every transfer succeeds (the client resubmits what an epoch change
// refused or aborted, and the caller sees no error), the balances match the
// acknowledged transfers, every replica reaches the last epoch, and the
// delivery logs pass the checker.
func TestEpochChangesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	for _, proto := range []string{"flexcast", "skeen", "tree"} {
		t.Run(proto, func(t *testing.T) { runEpochChanges(t, proto) })
	}
}

// bankRun is a cluster of proto (TLS on, delivery logs and metrics) with
// a client and the bank's accounts opened: the rig of the tests that
// change a running cluster under transfers.
type bankRun struct {
	cfg         *partition.ClusterConfig
	l           *Local
	dir, logDir string
	c           *client.Client
	ctx         context.Context
	accounts    []string
	p           *protocol.Protocol
	top         *partition.Topology
	pm          *partition.PartitionMap
}

func startBankRun(t *testing.T, proto string) *bankRun {
	t.Helper()
	r := &bankRun{dir: t.TempDir(), logDir: t.TempDir(), cfg: testcluster.Layout(t, proto, testaddr.Cluster)}
	r.l = startLocalConfig(t, Config{Cluster: r.cfg, Dir: r.dir, DeliveryLogDir: r.logDir, MetricsAddr: "127.0.0.1:0"})
	if r.l.ClientTLS() == nil {
		t.Fatal("the cluster runs without TLS")
	}
	var err error
	if r.p, r.top, r.pm, err = protocol.Build(r.cfg); err != nil {
		t.Fatal(err)
	}
	r.ctx = ctxTimeout(t, 3*time.Minute)
	if r.c, err = client.New(r.ctx, client.Config{Endpoints: r.l.Endpoints(), TLS: r.l.ClientTLS()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.c.Close() })
	r.accounts = openAccounts(r.ctx, t, r.c)
	return r
}

func runEpochChanges(t *testing.T, proto string) {
	r := startBankRun(t, proto)
	l, p, top, ctx, c, accounts, logDir := r.l, r.p, r.top, r.ctx, r.c, r.accounts, r.logDir

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	changed := make(chan uint64, 1)
	go func() {
		defer stopRun()
		changed <- changeEpochs(runCtx, t, l, p, top)
	}()
	b := transfer(ctx, runCtx, c, accounts)
	last := <-changed
	if len(b.failures) > 0 {
		t.Fatalf("%d transfers failed, first: %v", len(b.failures), b.failures[0])
	}
	if last != 1+epochChanges {
		t.Fatalf("the changes reached epoch %d, want %d", last, 1+epochChanges)
	}
	if c.EpochResubmits() == 0 {
		t.Errorf("the client resubmitted nothing: no request met a change of the epoch")
	}
	waitEpoch(t, l, last)
	checkGenerations(t, l, proto, last)
	checkBalances(ctx, t, c, l, accounts, b)
	rep := checkLogs(t, l, logDir, false)
	t.Logf("%s: %d changes, %d transfers acknowledged (%d moved money) with no error, %d resubmitted for a changed epoch; log: %s",
		proto, epochChanges, b.acked, b.moved, c.EpochResubmits(), rep.Summary())
}

// changeEpochs asks for epochChanges changes, each after some transfers,
// and returns the epoch the last one starts: every other one keeps the
// overlay, the others rotate the ranks (and, with a tree, hang every group
// under the new lowest rank), so that FlexCast and the tree protocol start
// new cores under load. Each goes to the group that takes the changes in
// its epoch. A change refused while the previous is under way, or for an
// epoch that just ended, is asked again.
func changeEpochs(ctx context.Context, t *testing.T, l *Local, p *protocol.Protocol, top *partition.Topology) uint64 {
	var last uint64
	cur := top
	for made := 0; made < epochChanges; {
		if err := sleepCtx(ctx, 150*time.Millisecond); err != nil {
			t.Errorf("changes: %v after %d", err, made)
			return last
		}
		req, next := &apipb.ReconfigureRequest{}, cur
		if made%2 == 1 {
			req, next = rotateOverlay(t, cur)
		}
		entry := cur.Name(p.ChangeEntry(cur))
		err := callLeader(t, l, entry, func(kv apipb.KVClient) error {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			resp, err := kv.Reconfigure(cctx, req)
			last = max(last, resp.GetEpoch())
			return err
		})
		switch {
		case err == nil:
			made++
			cur = next
		case status.Code(err) == codes.FailedPrecondition && (strings.Contains(err.Error(), "under way") || strings.Contains(err.Error(), apipb.EpochChangedText)):
		default:
			t.Errorf("change %d at %s: %v", made+1, entry, err)
			return last
		}
	}
	return last
}

// rotateOverlay returns the request of the overlay that follows cur's: its
// ranks rotated by one, and, with a tree, every group under the new lowest
// rank; and the topology it makes.
func rotateOverlay(t *testing.T, cur *partition.Topology) (*apipb.ReconfigureRequest, *partition.Topology) {
	t.Helper()
	n := cur.Len()
	order := make([]partition.GroupID, n)
	req := &apipb.ReconfigureRequest{}
	for k := range n {
		order[k] = cur.Ranks().Group(partition.GroupID((k + 1) % n))
		req.Overlay = append(req.Overlay, cur.Name(order[k]))
	}
	var parent []partition.GroupID
	if cur.HasTree() {
		parent = make([]partition.GroupID, n)
		for g := range parent {
			parent[g] = order[0]
			if partition.GroupID(g) != order[0] {
				req.Tree = append(req.Tree, &apipb.TreeEdge{Child: cur.Name(partition.GroupID(g)), Parent: cur.Name(order[0])})
			}
		}
		parent[order[0]] = partition.NoGroup
	}
	next, err := cur.WithOverlay(order, parent)
	if err != nil {
		t.Fatal(err)
	}
	return req, next
}

// waitEpoch waits until every replica reports epoch e.
func waitEpoch(t *testing.T, l *Local, e uint64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for _, addr := range l.Endpoints() {
		kv := dial(t, l, addr)
		for {
			resp, err := kv.Status(ctxTimeout(t, 5*time.Second), &apipb.StatusRequest{})
			if err == nil && resp.GetEpoch() == e {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica at %s: epoch %d (%v), want %d", addr, resp.GetEpoch(), err, e)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}

// TestReconfigureRefusals: a change is refused, naming the problem, with
// nothing changed: at a group that does not take changes, with an unknown,
// missing or duplicate group, a tree that is not a tree, or for an epoch
// that ended; after a change of the ranks, at the old lowest rank.
func TestReconfigureRefusals(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	cfg := testcluster.Layout(t, "flexcast", testaddr.Cluster)
	dir := t.TempDir()
	// The bound of a change that names an epoch the group has not started
	// (it waits that long for it).
	l := startLocalConfig(t, Config{Cluster: cfg, Dir: dir, WaitMax: 3 * time.Second})
	reconfigure := func(group string, req *apipb.ReconfigureRequest) error {
		return callLeader(t, l, group, func(kv apipb.KVClient) error {
			_, err := kv.Reconfigure(ctxTimeout(t, 10*time.Second), req)
			return err
		})
	}
	edges := func(pairs ...string) []*apipb.TreeEdge {
		var out []*apipb.TreeEdge
		for i := 0; i < len(pairs); i += 2 {
			out = append(out, &apipb.TreeEdge{Child: pairs[i], Parent: pairs[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name, group string
		req         *apipb.ReconfigureRequest
		code        codes.Code
		text        string
	}{
		{"another group", "eu-west-3", &apipb.ReconfigureRequest{}, codes.FailedPrecondition, "enter at group eu-west-1"},
		{"unknown", "eu-west-1", &apipb.ReconfigureRequest{Overlay: []string{"eu-west-1", "eu-west-3", "mars"}}, codes.InvalidArgument, `unknown group "mars"`},
		{"missing", "eu-west-1", &apipb.ReconfigureRequest{Overlay: []string{"eu-west-1", "eu-west-3"}}, codes.InvalidArgument, "missing [eu-central-1]"},
		{"duplicate", "eu-west-1", &apipb.ReconfigureRequest{Overlay: []string{"eu-west-1", "eu-west-3", "eu-west-3"}}, codes.InvalidArgument, "listed twice"},
		{"cycle", "eu-west-1", &apipb.ReconfigureRequest{Tree: edges("eu-west-3", "eu-central-1", "eu-central-1", "eu-west-3")}, codes.InvalidArgument, "tree"},
		{"ahead", "eu-west-1", &apipb.ReconfigureRequest{Epoch: 5}, codes.ResourceExhausted, "not started"},
	} {
		err := reconfigure(tc.group, tc.req)
		if status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s: %v, want %s naming %q", tc.name, err, tc.code, tc.text)
		}
	}
	// Only the administrator changes the cluster: another user of the
	// cluster's CA is refused, and nothing changes.
	err := reconfigureAs(t, l, dir, "alice", "eu-west-1", &apipb.ReconfigureRequest{Epoch: 1})
	if status.Code(err) != codes.PermissionDenied || !strings.Contains(err.Error(), `user "alice" may not change the cluster`) {
		t.Errorf("a change by alice: %v, want PermissionDenied naming her", err)
	}
	waitEpoch(t, l, 1)
	if err := reconfigure("eu-west-1", &apipb.ReconfigureRequest{Epoch: 1}); err != nil {
		t.Fatalf("change of epoch 1: %v", err)
	}
	if err := reconfigure("eu-west-1", &apipb.ReconfigureRequest{Epoch: 1}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), apipb.EpochChangedText) {
		t.Errorf("a second change of epoch 1: %v, want FailedPrecondition %q", err, apipb.EpochChangedText)
	}
	waitEpoch(t, l, 2)
	// New ranks: eu-west-3 is the lowest from epoch 3 on, and takes the
	// changes; eu-west-1 refuses them, naming it.
	if err := reconfigure("eu-west-1", &apipb.ReconfigureRequest{Epoch: 2, Overlay: []string{"eu-west-3", "eu-west-1", "eu-central-1"}}); err != nil {
		t.Fatalf("change of the ranks at epoch 2: %v", err)
	}
	waitEpoch(t, l, 3)
	if err := reconfigure("eu-west-1", &apipb.ReconfigureRequest{Epoch: 3}); status.Code(err) != codes.FailedPrecondition || !strings.Contains(err.Error(), "enter at group eu-west-3") {
		t.Errorf("a change at the old lowest rank: %v, want FailedPrecondition naming eu-west-3", err)
	}
	checkNextEpochWaits(t, reconfigure)
}

// checkNextEpochWaits: a change that names the next epoch (its client saw
// another group start it) waits at the group until the group starts it
// too, then runs: here the change of epoch 4 is sent before the change of
// epoch 3 is made, and starts epoch 5 once it is.
func checkNextEpochWaits(t *testing.T, reconfigure func(string, *apipb.ReconfigureRequest) error) {
	t.Helper()
	early := make(chan error, 1)
	sent := time.Now()
	go func() { early <- reconfigure("eu-west-3", &apipb.ReconfigureRequest{Epoch: 4}) }()
	const delay = 500 * time.Millisecond
	time.Sleep(delay)
	if err := reconfigure("eu-west-3", &apipb.ReconfigureRequest{Epoch: 3}); err != nil {
		t.Fatalf("change of epoch 3: %v", err)
	}
	if err := <-early; err != nil || time.Since(sent) < delay {
		t.Errorf("change of epoch 4 sent at epoch 3: %v after %v; want it taken once epoch 4 started", err, time.Since(sent))
	}
}

// reconfigureAs sends req to group's leader as user, with a client
// certificate the cluster's CA (under dir, l's data directory) issues for
// it, until a leader answers.
func reconfigureAs(t *testing.T, l *Local, dir, user, group string, req *apipb.ReconfigureRequest) error {
	t.Helper()
	ca, err := certs.LoadCA(CertsDir(dir), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	mine := filepath.Join(t.TempDir(), "certs")
	if _, err := ca.CreateClient(mine, user, certs.Options{}); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join(CertsDir(dir), certs.CAFile), filepath.Join(mine, certs.CAFile))
	cl, err := certs.LoadClient(mine, user)
	if err != nil {
		t.Fatal(err)
	}
	creds := grpc.WithTransportCredentials(credentials.NewTLS(certs.ClientConfig(cl)))
	deadline := time.Now().Add(leaderRetryMax)
	for {
		err = func() error {
			id := l.Leader(group)
			_, rc, ok := l.cfg.Cluster.Replica(id)
			if !ok {
				return status.Errorf(codes.Unavailable, "group %s has no leader", group)
			}
			cc, err := grpc.NewClient(rc.GRPC, creds, directCalls)
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			_, err = apipb.NewKVClient(cc).Reconfigure(ctxTimeout(t, 10*time.Second), req)
			return err
		}()
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkGenerations checks in the metrics of l that every replica runs the
// core started by the last change of the overlay (changeEpochs: the last
// of epochChanges alternating changes, which starts epoch last), none under
// Skeen, and keeps no older core nor holds an envelope once every group
// started it.
func checkGenerations(t *testing.T, l *Local, proto string, last uint64) {
	t.Helper()
	want := last
	if proto == "skeen" {
		want = 1
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		f := testcluster.ScrapeHTTP(t, l.MetricsAddr())
		bad := ""
		for _, id := range l.Nodes() {
			sel := map[string]string{"replica": id}
			gen, retiring, held := f.Sum("flexkv_core_generation", sel), f.Sum("flexkv_retiring_cores", sel), f.Sum("flexkv_held_envelopes", sel)
			if gen != float64(want) || retiring != 0 || held != 0 {
				bad = fmt.Sprintf("replica %s: core generation %v, %v retiring cores, %v envelopes held; want %d, 0, 0", id, gen, retiring, held, want)
			}
		}
		if bad == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(bad)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
