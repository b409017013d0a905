package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// TestMain checks that no goroutine outlives the tests; the examples' and
// TLS tests' clusters leave raft's, as package cluster's tests do.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testcluster.RaftFutureLeaks()...) }

// newTestClient connects to cl through its first replica, with short
// backoffs; modify adjusts the configuration.
func newTestClient(t *testing.T, cl *fakeCluster, modify func(*Config)) *Client {
	t.Helper()
	cfg := Config{Endpoints: []string{cl.endpoint(0, 0)}}
	if modify != nil {
		modify(&cfg)
	}
	c, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	c.backoffMin, c.backoffMax = time.Millisecond, 2*time.Millisecond
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return c
}

func i64(v int64) *int64 { return &v }

func add(key string, n int64) txn.Op { return txn.Op{Kind: txn.OpAdd, Key: []byte(key), Int: n} }
func put(key, v string) txn.Op       { return txn.Op{Kind: txn.OpPut, Key: []byte(key), Value: []byte(v)} }
func get(key string) txn.Op          { return txn.Op{Kind: txn.OpGet, Key: []byte(key)} }

// signal is a behaviour that closes ch and lets the call go on.
func signal(ch chan struct{}) func(context.Context) error {
	return func(context.Context) error { close(ch); return nil }
}

// groupsOf returns the groups of a result's destinations, in order.
func groupsOf(r *txn.Result) string {
	var out []string
	for _, d := range r.Destinations {
		out = append(out, d.Group)
	}
	return strings.Join(out, " ")
}

func TestNew(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	for _, tt := range []struct {
		region string
		home   string
	}{{"", "a"}, {"rb", "b"}, {"rc", "c"}, {"rd", "a"}, {"nowhere", "a"}} {
		c := newTestClient(t, cl, func(cfg *Config) { cfg.Region = tt.region })
		v := c.Topology()
		if got := v.Groups.Name(v.Home); got != tt.home {
			t.Errorf("region %q: home %s, want %s", tt.region, got, tt.home)
		}
		if v.Config.Protocol != "flexcast" || v.Latency == nil || v.Partitions.Len() != 4 || v.Region != tt.region {
			t.Errorf("region %q: topology %+v", tt.region, v)
		}
	}
}

func TestNewEndpoints(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{dead: [][2]int{{0, 0}}})
	ctx := context.Background()
	c := newTestClient(t, cl, func(cfg *Config) { cfg.Endpoints = []string{cl.endpoint(0, 0), cl.endpoint(1, 2)} })
	if c.Topology().Groups.Len() != groupsN {
		t.Errorf("topology with %d groups", c.Topology().Groups.Len())
	}
	if _, err := New(ctx, Config{Endpoints: []string{cl.endpoint(0, 0)}}); err == nil ||
		!strings.Contains(err.Error(), "no endpoint answered") || !strings.Contains(err.Error(), cl.endpoint(0, 0)) {
		t.Errorf("New with a dead endpoint: %v, want an error naming it", err)
	}
	for _, cfg := range []Config{
		{},
		{Endpoints: []string{cl.endpoint(1, 0)}, Sessions: -1},
		{Endpoints: []string{cl.endpoint(1, 0)}, Sessions: SessionsMax + 1},
	} {
		if c, err := New(ctx, cfg); err == nil {
			_ = c.Close()
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestSingleKeyOps(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, func(cfg *Config) { cfg.Region = "rb" })
	ctx := context.Background()
	for _, k := range []string{"a/1", "a/2", "a/3", "c/1"} {
		if err := c.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
			t.Fatalf("Put(%s): %v", k, err)
		}
	}
	if v, found, err := c.Get(ctx, []byte("c/1")); err != nil || !found || string(v) != "vc/1" {
		t.Errorf("Get(c/1) = %q, %v, %v, want vc/1, true, nil", v, found, err)
	}
	if v, found, err := c.Get(ctx, []byte("b/none")); err != nil || found || v != nil {
		t.Errorf("Get(b/none) = %q, %v, %v, want nil, false, nil", v, found, err)
	}
	kvs, err := c.Scan(ctx, []byte("a/"), []byte("a0"), 2)
	if err != nil || len(kvs) != 2 || string(kvs[0].Key) != "a/1" || string(kvs[1].Value) != "va/2" {
		t.Errorf("Scan(a/, a0, 2) = %q, %v", kvs, err)
	}
	if kvs, err := c.Scan(ctx, []byte("a/"), []byte("a0"), 0); err != nil || len(kvs) != 3 {
		t.Errorf("Scan(a/, a0, 0) = %q, %v, want all 3", kvs, err)
	}
	if err := c.Delete(ctx, []byte("a/1")); err != nil {
		t.Fatal(err)
	}
	if _, found, err := c.Get(ctx, []byte("a/1")); err != nil || found {
		t.Errorf("Get after Delete: found %v, %v", found, err)
	}
	// Each went to its owner: a's leader (replica 0) saw 3 puts, the scans,
	// the delete and the get.
	if n := cl.count(0, 0, "put"); n != 3 {
		t.Errorf("group a got %d puts, want 3", n)
	}
	if n := cl.count(2, 0, "get"); n != 1 {
		t.Errorf("group c got %d gets, want 1", n)
	}

	// A replicated key: the write reaches every group, as a transaction;
	// the read is served by the home group (b, from region rb).
	if err := c.Put(ctx, []byte("i/7"), []byte("item")); err != nil {
		t.Fatal(err)
	}
	for g := range groupsN {
		if v := valueOf(cl.stores[g], "i/7"); v != "item" {
			t.Errorf("group %d holds i/7 = %q", g, v)
		}
	}
	if n := cl.count(0, 0, "txn"); n != 1 {
		t.Errorf("the replicated put reached a's leader as %d txns, want 1", n)
	}
	if v, found, err := c.Get(ctx, []byte("i/7")); err != nil || !found || string(v) != "item" {
		t.Errorf("Get(i/7) = %q, %v, %v", v, found, err)
	}
	if n := cl.count(1, 0, "get"); n != 2 { // b/none, then i/7
		t.Errorf("home group b served %d gets, want 2", n)
	}
	if err := c.Delete(ctx, []byte("i/7")); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := cl.stores[2].Get([]byte("i/7")); ok {
		t.Error("the replicated delete did not reach group c")
	}
}

// TestEntry: each protocol's entry group, and the destinations answering.
func TestEntry(t *testing.T) {
	for _, tt := range []struct {
		protocol, region string
		ops              []txn.Op
		entry            string // the group whose leader got the Txn call
		dests            string // the destinations, sorted
	}{
		{"flexcast", "rc", []txn.Op{add("b/x", 1), add("c/x", 1)}, "b", "b c"},
		{"flexcast", "", []txn.Op{add("c/x", 1), add("a/x", 1), add("b/x", 1)}, "a", "a b c"},
		{"skeen", "rc", []txn.Op{add("a/x", 1), add("b/x", 1)}, "b", "a b"},      // rc: b at 20ms, a at 50ms
		{"skeen", "rd", []txn.Op{add("a/x", 1), add("c/x", 1)}, "c", "a c"},      // a region without a group
		{"skeen", "nowhere", []txn.Op{add("b/x", 1), add("c/x", 1)}, "b", "b c"}, // not in the matrix: lca
		{"skeen", "rc", []txn.Op{add("a/x", 1)}, "a", "a"},
		{"tree", "", []txn.Op{add("b/x", 1), add("c/x", 1)}, "a", "b c"}, // the root, not a destination
		{"tree", "", []txn.Op{add("a/x", 1), add("c/x", 1)}, "a", "a c"},
		{"tree", "", []txn.Op{add("c/x", 1)}, "c", "c"},
		{"tree", "rc", []txn.Op{get("i/1")}, "c", "c"}, // replicated reads: the home group
	} {
		t.Run(fmt.Sprintf("%s/%s/%s", tt.protocol, tt.region, tt.dests), func(t *testing.T) {
			cl := newFakeCluster(t, fakeOptions{protocol: tt.protocol})
			c := newTestClient(t, cl, func(cfg *Config) { cfg.Region = tt.region })
			res, err := c.Txn(context.Background(), &txn.Txn{Then: tt.ops})
			if err != nil {
				t.Fatalf("Txn: %v", err)
			}
			var entries []string
			for g := range groupsN {
				if cl.count(g, 0, "txn") > 0 {
					entries = append(entries, c.Topology().Groups.Name(partition.GroupID(g)))
				}
			}
			if got := strings.Join(entries, " "); got != tt.entry {
				t.Errorf("Txn sent to %q, want %q", got, tt.entry)
			}
			got := strings.Fields(groupsOf(res))
			if strings.Join(sorted(got), " ") != tt.dests {
				t.Errorf("destinations %v, want %s", got, tt.dests)
			}
			if !res.Succeeded || len(res.Results) != len(tt.ops) {
				t.Errorf("result %+v", res)
			}
			for i, r := range res.Results {
				if r.Index != i {
					t.Errorf("results[%d].Index = %d", i, r.Index)
				}
			}
		})
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestNotLeaderRedirect(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.setLeader(0, 2)
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	if err := c.Put(ctx, []byte("a/k"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	// The session's open, the first call at a, went to replica 0, which
	// redirected to 2; 1 was never asked.
	calls := func(r int) int { return cl.count(0, r, "open") + cl.count(0, r, "put") }
	if n0, n1, n2 := calls(0), calls(1), calls(2); n0 != 1 || n1 != 0 || n2 != 2 {
		t.Errorf("opens and puts at a's replicas: %d %d %d, want 1 0 2", n0, n1, n2)
	}
	// The leader is remembered.
	if err := c.Put(ctx, []byte("a/k"), []byte("2")); err != nil {
		t.Fatal(err)
	}
	if n0, n2 := calls(0), calls(2); n0 != 1 || n2 != 3 {
		t.Errorf("after the first put: %d calls at replica 0, %d at 2, want 1 and 3", n0, n2)
	}
	// A new leader, and followers that do not know it: the client walks
	// the replicas from the old leader on.
	cl.mu.Lock()
	cl.noHint = true
	cl.mu.Unlock()
	cl.setLeader(0, 1)
	if err := c.Put(ctx, []byte("a/k"), []byte("3")); err != nil {
		t.Fatal(err)
	}
	if n0, n1, n2 := calls(0), calls(1), calls(2); n0 != 2 || n1 != 1 || n2 != 4 {
		t.Errorf("opens and puts at a's replicas: %d %d %d, want 2 1 4", n0, n1, n2)
	}
	if v := valueOf(cl.stores[0], "a/k"); v != "3" {
		t.Errorf("a/k = %q, want 3", v)
	}
}

func TestDeadReplica(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{dead: [][2]int{{1, 0}}})
	cl.setLeader(1, 1)
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	if err := c.Put(ctx, []byte("b/k"), []byte("v")); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if n := cl.count(1, 1, "put"); n != 1 {
		t.Errorf("replica 1 of b got %d puts, want 1", n)
	}
	// A client whose first call to b is an Await meets the dead replica
	// first, and moves on.
	c2 := newTestClient(t, cl, nil)
	res, err := c2.Txn(ctx, &txn.Txn{Then: []txn.Op{add("a/n", 1), add("b/n", 2)}})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	if got := sorted(strings.Fields(groupsOf(res))); strings.Join(got, " ") != "a b" || res.Results[1].Int != 2 {
		t.Errorf("result %+v", res)
	}
	if n := cl.count(1, 1, "await"); n != 1 {
		t.Errorf("replica 1 of b got %d awaits, want 1", n)
	}
}

func TestBusyThenSuccess(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.rep[0][0].then("txn", busy, busy)
	c := newTestClient(t, cl, nil)
	res, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 4)}})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	if res.Results[0].Int != 4 {
		t.Errorf("result %+v", res)
	}
	calls := cl.calls()["a/0"]
	if len(calls) != 5 { // topology, the session's open, then three txns
		t.Fatalf("calls at a/0: %v, want the topology, an open and three txns", calls)
	}
	for _, ca := range calls[2:] {
		if ca.method != "txn" || ca.id != res.ID {
			t.Errorf("call %+v, want txn %s", ca, res.ID)
		}
	}
}

// TestDuplicateRetry: the answer to an executed transaction is lost; the
// retry, with the same id, gets the first result and executes nothing.
func TestDuplicateRetry(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.rep[0][0].then("txn-answer", unavailable(""))
	c := newTestClient(t, cl, nil)
	res, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 5), add("b/n", 1)}})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	if res.Results[0].Int != 5 || valueOf(cl.stores[0], "a/n") != "5" {
		t.Errorf("result %+v, a/n = %q: executed twice?", res, valueOf(cl.stores[0], "a/n"))
	}
	if cl.executions != 1 {
		t.Errorf("%d executions, want 1", cl.executions)
	}
	// a/0 lost the answer, a/1 redirected back to a/0, which answered.
	if n0, n1 := cl.count(0, 0, "txn"), cl.count(0, 1, "txn"); n0 != 2 || n1 != 1 {
		t.Errorf("txns at a/0, a/1: %d, %d, want 2, 1", n0, n1)
	}
	for where, calls := range cl.calls() {
		for _, ca := range calls {
			if ca.method != "topology" && ca.method != "open" && ca.id != res.ID {
				t.Errorf("%s got %+v, want every call about %s", where, ca, res.ID)
			}
		}
	}
}

// TestAwaitOrder: Destinations lists the answers in arrival order, not
// in rank order.
func TestAwaitOrder(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	openB, openC := cl.gate(1), cl.gate(2)
	c := newTestClient(t, cl, nil)
	var mu sync.Mutex
	var order []string
	c.answered = func(g string) {
		mu.Lock()
		order = append(order, g)
		mu.Unlock()
		switch g {
		case "a":
			openC()
		case "c":
			openB()
		}
	}
	res, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 1), add("b/n", 2), add("c/n", 3)}})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	if got := groupsOf(res); got != "a c b" {
		t.Errorf("destinations %q, want \"a c b\" (%v)", got, order)
	}
	for i := 1; i < len(res.Destinations); i++ {
		if res.Destinations[i].Ms < res.Destinations[i-1].Ms {
			t.Errorf("latencies not in arrival order: %+v", res.Destinations)
		}
	}
	if len(res.Results) != 3 || res.Results[2].Int != 3 || string(res.Results[1].Key) != "b/n" {
		t.Errorf("results %+v", res.Results)
	}
}

func TestDeadline(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	open := cl.gate(1) // b never answers
	defer open()
	c := newTestClient(t, cl, func(cfg *Config) { cfg.Sessions = 1 })
	tx := &txn.Txn{Then: []txn.Op{add("a/n", 1), add("b/n", 1)}}
	// Connect first, so that only the call's own goroutines can leak.
	if err := c.Put(context.Background(), []byte("b/warm"), nil); err != nil {
		t.Fatal(err)
	}
	ignore := goleak.IgnoreCurrent()

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Txn(ctx, tx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Txn error %v, want one matching context.DeadlineExceeded", err)
	}
	cl.waitAwaits(t) // the fake's handler of the abandoned Await is no leak of the client
	goleak.VerifyNone(t, ignore)

	// Cancellation, once b's replica is waiting.
	waiting := make(chan struct{})
	cl.rep[1][0].then("await", signal(waiting))
	ctx, cancel = context.WithCancel(context.Background())
	go func() {
		<-waiting
		cancel()
	}()
	if _, err := c.Txn(ctx, tx); !errors.Is(err, context.Canceled) {
		t.Errorf("Txn error %v, want one matching context.Canceled", err)
	}
	cl.waitAwaits(t)
	goleak.VerifyNone(t, ignore)
	if len(c.sessions) != 1 {
		t.Error("the session was not returned")
	}
}

func TestSessions(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, func(cfg *Config) { cfg.Sessions = 1 })
	ctx := context.Background()
	for range 3 {
		if err := c.Put(ctx, []byte("a/k"), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	calls := cl.calls()["a/0"][2:] // after the topology and the session's open
	var client uint64
	for i, ca := range calls {
		var cid, seq uint64
		if _, err := fmt.Sscanf(ca.id, "c%d.%d", &cid, &seq); err != nil {
			t.Fatalf("id %q: %v", ca.id, err)
		}
		if i == 0 {
			client = cid
		}
		if cid != client || seq != uint64(i+1) || cid == 0 || cid >= 1<<63 {
			t.Errorf("call %d: id %s, want c%d.%d with a 63-bit client id", i, ca.id, client, i+1)
		}
	}

	// The only session is busy: a second call waits, up to its context.
	open := cl.gate(1)
	waiting := make(chan struct{})
	cl.rep[1][0].then("await", signal(waiting))
	done := make(chan error)
	go func() {
		_, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{add("a/n", 1), add("b/n", 1)}})
		done <- err
	}()
	<-waiting
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, _, err := c.Get(short, []byte("a/k")); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "free session") {
		t.Errorf("Get with every session busy: %v, want a deadline waiting for a session", err)
	}
	open()
	if err := <-done; err != nil {
		t.Errorf("the first call: %v", err)
	}
}

func TestBadInputStaysLocal(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	long := strings.Repeat("a", partition.KeyMax+1)
	for _, tt := range []struct {
		name  string
		run   func() error
		class error
	}{
		{"empty txn", func() error { _, err := c.Txn(ctx, &txn.Txn{}); return err }, txn.ErrInvalid},
		{"nil txn", func() error { _, err := c.Txn(ctx, nil); return err }, txn.ErrInvalid},
		{"no partition", func() error { _, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{get("x")}}); return err }, partition.ErrNoPartition},
		{"unknown op", func() error {
			_, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: 9, Key: []byte("a/k")}}})
			return err
		}, txn.ErrInvalid},
		{"no operand", func() error {
			_, err := c.Txn(ctx, &txn.Txn{If: []txn.Compare{{Key: []byte("a/k"), Cmp: txn.CmpEqual}}, Then: []txn.Op{get("a/k")}})
			return err
		}, txn.ErrInvalid},
		{"txn scan of no partition", func() error {
			_, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: txn.OpScan, Key: []byte("x0"), End: []byte("x9"), Limit: 1}}})
			return err
		}, partition.ErrNoPartition},
		{"scan of no partition", func() error { _, err := c.Scan(ctx, []byte("x0"), []byte("x9"), 1); return err }, partition.ErrNoPartition},
		{"consistent scan of no partition", func() error { _, err := c.ScanConsistent(ctx, []byte("x0"), []byte("x9"), 1); return err }, partition.ErrNoPartition},
		{"consistent scan backwards", func() error { _, err := c.ScanConsistent(ctx, []byte("a0"), []byte("a/"), 1); return err }, txn.ErrInvalid},
		{"get empty key", func() error { _, _, err := c.Get(ctx, nil); return err }, partition.ErrInvalidKey},
		{"get long key", func() error { _, _, err := c.Get(ctx, []byte(long)); return err }, txn.ErrInvalid},
		{"put no partition", func() error { return c.Put(ctx, []byte("zz"), nil) }, partition.ErrNoPartition},
		{"put huge value", func() error { return c.Put(ctx, []byte("a/k"), make([]byte, txn.ValueMax+1)) }, txn.ErrInvalid},
		{"delete empty key", func() error { return c.Delete(ctx, []byte{}) }, txn.ErrInvalid},
		{"scan negative limit", func() error { _, err := c.Scan(ctx, []byte("a/"), []byte("a0"), -1); return err }, txn.ErrInvalid},
		{"scan limit too large", func() error {
			_, err := c.Scan(ctx, []byte("a/"), []byte("a0"), txn.ScanLimitMax+1)
			return err
		}, txn.ErrInvalid},
		{"scan backwards", func() error { _, err := c.Scan(ctx, []byte("a0"), []byte("a/"), 1); return err }, txn.ErrInvalid},
		{"call without name", func() error { _, err := c.Call(ctx, "", nil, nil); return err }, txn.ErrInvalid},
		{"call bad name", func() error { _, err := c.Call(ctx, "New Order", nil, nil); return err }, txn.ErrInvalid},
		{"call huge args", func() error { _, err := c.Call(ctx, "p", make([]byte, txn.ProcArgsMax+1), nil); return err }, txn.ErrInvalid},
		{"call empty key", func() error { _, err := c.Call(ctx, "p", nil, [][]byte{[]byte("a/k"), nil}); return err }, txn.ErrInvalid},
		{"call no partition", func() error { _, err := c.Call(ctx, "p", nil, [][]byte{[]byte("x")}); return err }, partition.ErrNoPartition},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if !errors.Is(err, tt.class) || !errors.Is(err, txn.ErrInvalid) {
				t.Errorf("error %v, want one matching %v and txn.ErrInvalid", err, tt.class)
			}
		})
	}
	for where, calls := range cl.calls() {
		for _, ca := range calls {
			if ca.method != "topology" {
				t.Errorf("%s received %+v", where, ca)
			}
		}
	}
}

func TestAborted(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	if err := c.Put(ctx, []byte("a/n"), []byte("x")); err != nil {
		t.Fatal(err)
	}
	res, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{add("a/n", 1), put("b/k", "v")}})
	if !errors.Is(err, txn.ErrAborted) || !strings.Contains(err.Error(), "not an integer") || res != nil {
		t.Errorf("Txn = %+v, %v, want an abort naming the non-integer", res, err)
	}
}

func TestInconsistent(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.flip[1] = true
	c := newTestClient(t, cl, nil)
	_, err := c.Txn(context.Background(), &txn.Txn{
		If:   []txn.Compare{{Key: []byte("a/n"), Cmp: txn.CmpEqual, Int: i64(0)}},
		Then: []txn.Op{add("a/n", 1), add("b/n", 1)},
	})
	if !errors.Is(err, ErrInconsistent) {
		t.Errorf("Txn error %v, want one matching ErrInconsistent", err)
	}
}

func TestCompareAcrossGroups(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	transfer := &txn.Txn{
		If:   []txn.Compare{{Key: []byte("a/acct"), Cmp: txn.CmpGreaterEqual, Int: i64(5)}},
		Then: []txn.Op{add("a/acct", -5), add("c/acct", 5)},
		Else: []txn.Op{get("a/acct")},
	}
	res, err := c.Txn(ctx, transfer)
	if err != nil || res.Succeeded || len(res.Results) != 1 || res.Results[0].Found {
		t.Fatalf("transfer from an empty account = %+v, %v, want the else branch", res, err)
	}
	if err := c.Put(ctx, []byte("a/acct"), []byte("7")); err != nil {
		t.Fatal(err)
	}
	res, err = c.Txn(ctx, transfer)
	if err != nil || !res.Succeeded || res.Results[0].Int != 2 || res.Results[1].Int != 5 {
		t.Fatalf("transfer = %+v, %v", res, err)
	}
	if res.ID == "" || !strings.HasPrefix(res.ID, "c") {
		t.Errorf("id %q", res.ID)
	}
}

func TestCall(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, func(cfg *Config) { cfg.Region = "rb" })
	ctx := context.Background()
	res, err := c.Call(ctx, "new-order", []byte("args"), [][]byte{[]byte("c/1"), []byte("a/1"), []byte("i/3")})
	if err != nil {
		t.Fatalf("Call: %v", err)
	}
	if got := strings.Join(sorted(strings.Fields(groupsOf(res))), " "); got != "a c" || !res.Succeeded {
		t.Errorf("result %+v, want destinations a and c", res)
	}
	// Only replicated keys: the home group.
	res, err = c.Call(ctx, "stock-level", nil, [][]byte{[]byte("i/3")})
	if err != nil || groupsOf(res) != "b" {
		t.Errorf("Call on items = %+v, %v, want home group b", res, err)
	}
}

func TestClose(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c, err := New(context.Background(), Config{Endpoints: []string{cl.endpoint(0, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, _, err := c.Get(context.Background(), []byte("a/k")); !errors.Is(err, ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if _, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{get("a/k")}}); !errors.Is(err, ErrClosed) {
		t.Errorf("Txn after Close: %v, want ErrClosed", err)
	}
}

// TestWANDelay: with Config.WANDelay every request to a group waits the
// one-way delay there and back, so each destination's answer comes at
// least two delays after the call began (lower bounds only: a loaded
// machine can only add).
func TestWANDelay(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	delays := map[string]time.Duration{"a": 0, "b": 20 * time.Millisecond, "c": 40 * time.Millisecond}
	c := newTestClient(t, cl, func(cfg *Config) {
		cfg.WANDelay = func(g string) time.Duration { return delays[g] }
	})
	res, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 1), add("b/n", 2), add("c/n", 3)}})
	if err != nil {
		t.Fatalf("Txn: %v", err)
	}
	if len(res.Destinations) != 3 {
		t.Fatalf("destinations %+v", res.Destinations)
	}
	for _, d := range res.Destinations {
		if rtt := 2 * delays[d.Group]; d.Ms < float64(rtt.Milliseconds()) {
			t.Errorf("group %s answered after %.1f ms, before the emulated round trip of %s", d.Group, d.Ms, rtt)
		}
	}
	start := time.Now()
	if _, _, err := c.Get(context.Background(), []byte("c/n")); err != nil {
		t.Fatalf("Get: %v", err)
	}
	if el := time.Since(start); el < 2*delays["c"] {
		t.Errorf("get at group c took %s, less than the emulated round trip", el)
	}

	_, err = New(context.Background(), Config{
		Endpoints: []string{cl.endpoint(0, 0)},
		WANDelay:  func(string) time.Duration { return -time.Millisecond },
	})
	if err == nil || !strings.Contains(err.Error(), "WANDelay") {
		t.Errorf("New with a negative delay: %v, want an error naming WANDelay", err)
	}
}

// A scan larger than one answer comes back whole: the client asks for the
// pages after the first itself, up to its limit.
func TestScanPages(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	var want []string
	for i := range 7 {
		k := fmt.Sprintf("a/%d", i)
		want = append(want, k)
		if err := c.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
			t.Fatal(err)
		}
	}
	cl.mu.Lock()
	cl.scanPage = 3
	cl.mu.Unlock()
	keys := func(kvs []txn.KV) []string {
		out := []string{}
		for _, kv := range kvs {
			out = append(out, string(kv.Key))
			if string(kv.Value) != "v"+string(kv.Key) {
				t.Errorf("key %s: value %q", kv.Key, kv.Value)
			}
		}
		return out
	}
	for _, c2 := range []struct {
		limit int
		want  []string
	}{{0, want}, {7, want}, {5, want[:5]}, {3, want[:3]}, {1, want[:1]}} {
		kvs, err := c.Scan(ctx, []byte("a/"), []byte("a0"), c2.limit)
		if got := keys(kvs); err != nil || !slices.Equal(got, c2.want) {
			t.Errorf("Scan(a/, a0, %d) in pages of 3 = %q, %v, want %q", c2.limit, got, err, c2.want)
		}
	}
	scans := 0
	for _, calls := range cl.calls() {
		for _, call := range calls {
			if call.method == "scan" {
				scans++
			}
		}
	}
	// 3 pages for limits 0 and 7, 2 for 5, 1 each for 3 and 1.
	if scans != 3+3+2+1+1 {
		t.Errorf("%d Scan calls, want %d", scans, 10)
	}
}

// A page that does not fit the request is refused, not followed: a server
// that kept saying "more" from the same key would make the scan loop.
func TestCheckPage(t *testing.T) {
	kvs := func(keys ...string) []txn.KV {
		var out []txn.KV
		for _, k := range keys {
			out = append(out, txn.KV{Key: []byte(k)})
		}
		return out
	}
	for _, c := range []struct {
		name       string
		page       []txn.KV
		from, end  string
		want       int
		next       string
		consistent bool
	}{
		{"last page", kvs("a/1", "a/2"), "a/", "a0", 5, "", true},
		{"goes on", kvs("a/1", "a/2"), "a/", "a0", 5, "a/3", true},
		{"from its own start", kvs("a/1"), "a/1", "a0", 5, "a/2", true},
		{"empty and goes on", nil, "a/", "a0", 5, "a/3", false},
		{"full and goes on", kvs("a/1", "a/2"), "a/", "a0", 2, "a/3", false},
		{"goes on at its last key", kvs("a/1", "a/2"), "a/", "a0", 5, "a/2", false},
		{"goes on past the end", kvs("a/1"), "a/", "a0", 5, "a0", false},
		{"more than asked", kvs("a/1", "a/2"), "a/", "a0", 1, "", false},
		{"out of order", kvs("a/2", "a/1"), "a/", "a0", 5, "", false},
		{"before the start", kvs("a/0"), "a/1", "a0", 5, "", false},
		{"past the end", kvs("a0"), "a/", "a0", 5, "", false},
	} {
		var next []byte
		if c.next != "" {
			next = []byte(c.next)
		}
		err := checkPage(c.page, []byte(c.from), []byte(c.end), c.want, next)
		if (err == nil) != c.consistent || (err != nil && !errors.Is(err, ErrInconsistent)) {
			t.Errorf("%s: checkPage = %v, want consistent %v", c.name, err, c.consistent)
		}
	}
}

// An answer larger than the client receives is final, with an error naming
// its size; a server's own ResourceExhausted (admission control) is
// retried, and so is one whose text merely mentions a size.
func TestResourceExhaustedFinalOrRetried(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, func(cfg *Config) {
		cfg.DialOptions = []grpc.DialOption{grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(1 << 10))}
	})
	ctx := context.Background()
	if err := c.Put(ctx, []byte("a/big"), make([]byte, 2<<10)); err != nil {
		t.Fatal(err)
	}
	gets := cl.count(0, 0, "get")
	_, _, err := c.Get(ctx, []byte("a/big"))
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "more than the limit of 1024 bytes") {
		t.Errorf("Get of an answer past the receive limit = %v, want ErrTooLarge naming the limit", err)
	}
	if n := cl.count(0, 0, "get") - gets; n != 1 {
		t.Errorf("%d gets sent, want 1 (not retried)", n)
	}

	// The server refusing the request by size: final too.
	cl.rep[0][0].then("get", func(context.Context) error {
		return status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5000 vs. 4096)")
	})
	if _, _, err := c.Get(ctx, []byte("a/1")); !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "5000 bytes") {
		t.Errorf("Get refused by size at the server = %v, want ErrTooLarge naming 5000 bytes", err)
	}

	// Admission control: retried at the same replica until it answers.
	cl.rep[0][0].then("get", busy, func(context.Context) error {
		return status.Error(codes.ResourceExhausted, "server: outbox full (512 KiB vs. 512 KiB)")
	})
	gets = cl.count(0, 0, "get")
	if _, found, err := c.Get(ctx, []byte("a/none")); err != nil || found {
		t.Errorf("Get after two busy answers = %v, %v, want not found, nil", found, err)
	}
	if n := cl.count(0, 0, "get") - gets; n != 3 {
		t.Errorf("%d gets sent, want 3 (two busy, then the answer)", n)
	}
}

// expiredSession is a server's refusal of a request whose session it does
// not know.
func expiredSession(context.Context) error {
	return status.Error(codes.FailedPrecondition, "server: group a: group: session expired: c64.1: client 64 has no open session at group 0: not run; open a new session")
}

// gaveUp is a server that ended a wait at its own bound: the request may
// have been accepted.
func gaveUp(context.Context) error {
	return status.Error(codes.DeadlineExceeded, "server: no result within 30s, this server's bound on a wait")
}

// TestSessionRenewed: a write refused for an expired session before it
// ran goes again, once, under a new session and as a new transaction; the
// caller sees one success.
func TestSessionRenewed(t *testing.T) {
	for _, tc := range []struct {
		name, method string
		run          func(c *Client) error
	}{
		{"txn", "txn", func(c *Client) error {
			_, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 3), add("b/n", 1)}})
			return err
		}},
		{"put", "put", func(c *Client) error { return c.Put(context.Background(), []byte("a/n"), []byte("3")) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl := newFakeCluster(t, fakeOptions{})
			cl.rep[0][0].then(tc.method, expiredSession)
			c := newTestClient(t, cl, func(cfg *Config) { cfg.Sessions = 1 })
			if err := tc.run(c); err != nil {
				t.Fatalf("%s after its session expired: %v, want renewed and run", tc.name, err)
			}
			if cl.executions != 1 || valueOf(cl.stores[0], "a/n") != "3" {
				t.Errorf("%d executions, a/n = %q, want once and 3", cl.executions, valueOf(cl.stores[0], "a/n"))
			}
			var got []string
			for _, ca := range cl.calls()["a/0"][1:] {
				got = append(got, ca.method+" "+ca.id)
			}
			want := []string{"open ", tc.method + " c64.1", "open ", tc.method + " c128.2"}
			if !slices.Equal(got, want) {
				t.Errorf("calls at a/0: %q, want %q", got, want)
			}
		})
	}
}

// TestSessionExpiredUncertain: when an earlier attempt of a write may have
// been accepted, a later "session expired" is not resubmitted: the call
// fails with ErrSessionExpired, and nothing runs twice.
func TestSessionExpiredUncertain(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.rep[0][0].then("txn", gaveUp, expiredSession)
	c := newTestClient(t, cl, nil)
	_, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 3)}})
	if !errors.Is(err, ErrSessionExpired) || !strings.Contains(err.Error(), "may have run") {
		t.Fatalf("Txn: %v, want ErrSessionExpired saying it may have run", err)
	}
	if n := cl.count(0, 0, "open"); n != 1 {
		t.Errorf("%d sessions opened, want 1: no renewal", n)
	}
	if n := cl.count(0, 0, "txn"); n != 2 {
		t.Errorf("%d txn attempts, want 2", n)
	}
}

// TestSessionRenewedAfterRedirect: a follower's redirect says the attempt
// did not run (apipb.NotRunTrailer), so an expired session found at the new
// leader is still renewed: the usual case of a client idle while its group
// changed leaders.
func TestSessionRenewedAfterRedirect(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, func(cfg *Config) { cfg.Sessions = 1 })
	ctx := context.Background()
	if err := c.Put(ctx, []byte("a/k"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	cl.setLeader(0, 2)
	cl.rep[0][2].then("put", expiredSession)
	if err := c.Put(ctx, []byte("a/k"), []byte("2")); err != nil {
		t.Fatalf("put after a redirect and an expired session: %v, want renewed and run", err)
	}
	if n := cl.count(0, 2, "open"); n != 1 {
		t.Errorf("%d sessions opened at the new leader, want 1", n)
	}
	if v := valueOf(cl.stores[0], "a/k"); v != "2" {
		t.Errorf("a/k = %q, want 2", v)
	}
}

// A transaction whose entry group computes other destinations than the
// client (their configurations differ) is refused there, before it runs:
// the client trusts that check, and its error matches ErrInconsistent and
// names the refusal.
func TestDestinationsDiffer(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.extraDst = partition.SetOf(1)
	c := newTestClient(t, cl, nil)
	_, err := c.Txn(context.Background(), &txn.Txn{Then: []txn.Op{add("a/n", 1), add("c/n", 1)}})
	if !errors.Is(err, ErrInconsistent) || !strings.Contains(err.Error(), apipb.DestinationsDifferText) {
		t.Errorf("Txn error %v, want one matching ErrInconsistent that says the destinations differ", err)
	}
	cl.mu.Lock()
	defer cl.mu.Unlock()
	if cl.executions != 0 {
		t.Errorf("%d transactions ran, want none", cl.executions)
	}
}

// A scan across the partitions of three groups reads each part at its own
// group, asking for that part only, in key order, page by page, up to the
// limit, and stops asking once the limit is reached.
func TestScanAcrossGroups(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	c := newTestClient(t, cl, nil)
	ctx := context.Background()
	var want []string
	for _, p := range []string{"a", "b", "c"} {
		for i := range 4 {
			k := fmt.Sprintf("%s/%d", p, i)
			want = append(want, k)
			if err := c.Put(ctx, []byte(k), []byte("v"+k)); err != nil {
				t.Fatal(err)
			}
		}
	}
	cl.mu.Lock()
	cl.scanPage = 3
	cl.mu.Unlock()
	count := func() map[string]int {
		n := map[string]int{}
		for where, calls := range cl.calls() {
			for _, call := range calls {
				if call.method == "scan" {
					n[where[:1]]++
				}
			}
		}
		return n
	}
	for _, tc := range []struct {
		start, end string
		limit      int
		want       []string
		calls      map[string]int // scans per group, cumulated
	}{
		{"a/", "c0", 0, want, map[string]int{"a": 2, "b": 2, "c": 2}},
		{"a/2", "c/1", 5, []string{"a/2", "a/3", "b/0", "b/1", "b/2"}, map[string]int{"a": 3, "b": 3, "c": 2}},
		{"a/3", "c/1", 100, []string{"a/3", "b/0", "b/1", "b/2", "b/3", "c/0"}, map[string]int{"a": 4, "b": 5, "c": 3}},
		{"0", "b/1", 100, []string{"a/0", "a/1", "a/2", "a/3", "b/0"}, map[string]int{"a": 6, "b": 6, "c": 3}}, // starts before every partition
	} {
		kvs, err := c.Scan(ctx, []byte(tc.start), []byte(tc.end), tc.limit)
		var got []string
		for _, kv := range kvs {
			got = append(got, string(kv.Key))
			if string(kv.Value) != "v"+string(kv.Key) {
				t.Errorf("key %s: value %q", kv.Key, kv.Value)
			}
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("Scan(%s, %s, %d) = %q, %v; want %q", tc.start, tc.end, tc.limit, got, err, tc.want)
		}
		if n := count(); !maps.Equal(n, tc.calls) {
			t.Errorf("Scan(%s, %s, %d): scans per group %v, want %v", tc.start, tc.end, tc.limit, n, tc.calls)
		}
	}
}
