package cluster

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testcluster.RaftFutureLeaks()...)
}

// testLogger returns a logger that writes to t's log, which go test shows
// when t fails (or with -v). Only for what logs while t runs.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, nil))
}

// testWriter is an io.Writer into t's log, a call to Log per write.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// describe returns the state of every node of l, a line each, for failure
// messages.
func describe(l *Local) string { return "\n\t" + strings.Join(l.Describe(), "\n\t") }

// startLocal starts cfg in dir, waits for every group's leader, and stops
// it at the end of the test.
func startLocal(t testing.TB, cfg *partition.ClusterConfig, dir string) *Local {
	t.Helper()
	return startLocalConfig(t, Config{Cluster: cfg, Dir: dir})
}

// startLocalConfig is startLocal with more settings: raft logs without
// fsync, and a 1s election timeout unless lc.Replication sets one. A leader
// holds its lease for half the election timeout: with less, a stall of a
// slow, loaded machine deposes the leader a test is talking to. The chaos
// tests, which want fast failover and retry through the client, ask for
// 200ms.
func startLocalConfig(t testing.TB, lc Config) *Local {
	t.Helper()
	lc.NoSync = true
	if lc.Replication.ElectionTimeout == 0 {
		lc.Replication.ElectionTimeout = time.Second
	}
	l, err := Start(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	waitLeaders(t, l)
	return l
}

func waitLeaders(t testing.TB, l *Local) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for _, g := range l.cfg.Cluster.Groups {
		for l.Leader(g.Name) == "" {
			if time.Now().After(deadline) {
				t.Fatalf("group %s has no leader:%s", g.Name, describe(l))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// followerOf returns the id of a replica of group that does not lead it
// now (the first in l's order), and the fatal error if there is none.
func followerOf(t testing.TB, l *Local, group string) string {
	t.Helper()
	leader := l.Leader(group)
	for _, id := range l.Nodes() {
		if l.Group(id) == group && id != leader {
			return id
		}
	}
	t.Fatalf("group %s has no follower", group)
	return ""
}

// dial returns a raw kvpb client of addr, a replica of l, with l's client
// credentials.
func dial(t testing.TB, l *Local, addr string) apipb.KVClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, clientCreds(l), directCalls)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return apipb.NewKVClient(cc)
}

// directCalls marks every call as a client's that routes itself
// (apipb.DirectHeader), as the Go client does: a replica answers a request
// it cannot serve with a refusal or a leader hint rather than forwarding
// it, which is what most tests of raw calls look at.
var directCalls = grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	return invoker(metadata.AppendToOutgoingContext(ctx, apipb.DirectHeader, "1"), method, req, reply, cc, opts...)
})

// leaderRetryMax is how long callLeader keeps retrying a call that its
// group's leader answered with Unavailable.
const leaderRetryMax = 10 * time.Second

// callLeader calls f with a raw client of group's leader and returns f's
// error. A leader can lose its lease while the machine stalls, and then
// answers Unavailable (not the leader) until an election elects another:
// while f fails with Unavailable, callLeader finds the leader again and
// calls f again, for up to leaderRetryMax. Any other outcome is returned at
// once, so that a test expecting InvalidArgument still sees it. f must be
// safe to repeat (a write with a client id and seq is applied once).
func callLeader(t testing.TB, l *Local, group string, f func(apipb.KVClient) error) error {
	t.Helper()
	deadline := time.Now().Add(leaderRetryMax)
	last := ""
	for {
		err := callLeaderOnce(t, l, group, f)
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			return err
		}
		if err.Error() != last { // once per answer, not once per try
			last = err.Error()
			t.Logf("group %s: %v; finding its leader again", group, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// openSession opens a client session at group's leader (kvpb
// OpenSession) and returns its id: a write's client_id there.
func openSession(t testing.TB, l *Local, group string) uint64 {
	t.Helper()
	var id uint64
	err := callLeader(t, l, group, func(c apipb.KVClient) error {
		r, err := c.OpenSession(ctxTimeout(t, 20*time.Second), &apipb.OpenSessionRequest{})
		id = r.GetClientId()
		return err
	})
	if err != nil {
		t.Fatalf("open a session at %s: %v", group, err)
	}
	return id
}

// callLeaderOnce calls f once with a raw client of group's current leader,
// on a connection of its own that it closes afterwards.
func callLeaderOnce(t testing.TB, l *Local, group string, f func(apipb.KVClient) error) error {
	t.Helper()
	id := l.Leader(group)
	if id == "" {
		return status.Errorf(codes.Unavailable, "group %s has no leader", group)
	}
	_, rc, ok := l.cfg.Cluster.Replica(id)
	if !ok {
		t.Fatalf("leader %s of group %s is not in the configuration", id, group)
	}
	cc, err := grpc.NewClient(rc.GRPC, clientCreds(l), directCalls)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	return f(apipb.NewKVClient(cc))
}

// clientCreds returns the transport credentials of l's root user: TLS, or
// none when l runs Insecure.
func clientCreds(l *Local) grpc.DialOption {
	if cfg := l.ClientTLS(); cfg != nil {
		return grpc.WithTransportCredentials(credentials.NewTLS(cfg))
	}
	return grpc.WithTransportCredentials(insecure.NewCredentials())
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// checkLogs waits (up to 20s) until the delivery logs in dir pass the
// checker with Complete (every replica delivered every message), and fails
// the test with the violations otherwise.
func checkLogs(t testing.TB, l *Local, dir string, genuine bool) check.Report {
	t.Helper()
	var rep check.Report
	deadline := time.Now().Add(20 * time.Second)
	for {
		if err := l.FlushLogs(); err != nil {
			t.Fatal(err)
		}
		c := check.New(check.Options{Complete: true, Genuine: genuine})
		if err := check.ScanLog(dir, c.Add); err != nil {
			t.Fatal(err)
		}
		rep = c.Report()
		if rep.OK() {
			return rep
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	// A replica that caught up from a raft snapshot did not log the
	// deliveries the snapshot covered: a message missing only there is
	// expected (and said), anything else fails.
	excused := 0
	for _, v := range rep.Violations {
		if id, ok := missingAt(v); ok && l.SnapshotsRestored(id) > 0 {
			t.Logf("expected after a snapshot install at %s: %s", id, v)
			excused++
			continue
		}
		t.Error(v)
	}
	if excused == len(rep.Violations) && excused == rep.ViolationsTotal() {
		return rep
	}
	for _, id := range l.Nodes() {
		if !l.Running(id) {
			t.Errorf("node %s is not running", id)
		}
	}
	t.Fatalf("delivery logs: %s", rep.Summary())
	return rep
}

// missingAt returns the replica an agreement or validity violation says a
// message is missing at ("... missing at eu-west-3/r4"), if it names one.
func missingAt(v check.Violation) (string, bool) {
	_, after, ok := strings.Cut(v.Detail, "missing at ")
	if !ok || strings.Contains(after, ",") {
		return "", false
	}
	_, id, ok := strings.Cut(after, "/")
	return id, ok
}
