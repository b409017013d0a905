package cluster

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/txn"
)

// TestBankUnderChaos runs concurrent transfers between accounts spread over
// every partition, each guarded by an `if` on the source balance, while the
// leaders of random groups are stopped and restarted from disk, followers
// restarted and replicas cut off. Afterwards:
// the total is conserved, no balance is negative, and each account's
// balance is its opening balance plus the amounts of the acknowledged
// transfers that moved money in or out of it: every acknowledged transfer
// applied exactly once (one applied twice, or lost, changes some balance).
// bankDuration is how long each protocol's bank run injects faults: a
// longer soak is `go test ./cluster -run TestBankUnderChaos -bank.duration=2m`.
var bankDuration = flag.Duration("bank.duration", 6*time.Second, "how long each bank run injects faults")

func TestBankUnderChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	for _, proto := range []string{"flexcast", "skeen", "tree"} {
		t.Run(proto, func(t *testing.T) { runBank(t, proto, false) })
	}
	// Raft snapshots every 64 entries, 16 kept after them: a restarted
	// follower is most often behind the leader's log and catches up from a
	// snapshot, installing the executor state (queued pieces, stored votes,
	// results) of a live group.
	t.Run("flexcast-snapshots", func(t *testing.T) { runBank(t, "flexcast", true) })
}

// Sizes of a bank run.
const (
	bankAccountsPerPartition = 2
	bankOpening              = 100 // every account's opening balance
	bankWorkers              = 8   // concurrent clients of transfers
)

// runBank runs TestBankUnderChaos's transfers under proto, with raft
// snapshots every 64 entries if snapshots, and checks the accounts and the
// replicas afterwards.
func runBank(t *testing.T, proto string, snapshots bool) {
	logDir := t.TempDir()
	// A 200ms election timeout: fast failover under the faults; the client
	// retries at the new leaders.
	rc := replication.Config{ElectionTimeout: 200 * time.Millisecond}
	if snapshots {
		rc.SnapshotThreshold, rc.TrailingLogs = 64, 16
	}
	l := startLocalConfig(t, Config{Cluster: testcluster.Layout(t, proto, testaddr.Cluster), Dir: t.TempDir(), DeliveryLogDir: logDir, Replication: rc})
	ctx := ctxTimeout(t, *bankDuration+2*time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	accounts := openAccounts(ctx, t, c)

	runCtx, stopRun := context.WithTimeout(ctx, *bankDuration)
	defer stopRun()
	chaos := &Chaos{
		Local: l, Seed: 7, Down: 700 * time.Millisecond,
		Faults: []Fault{
			{Kind: FaultLeaderKill, Every: 1500 * time.Millisecond},
			{Kind: FaultFollowerRestart, Every: 2 * time.Second},
			{Kind: FaultPartition, Every: 2500 * time.Millisecond},
			{Kind: FaultGroupPartition, Every: 3 * time.Second},
		},
		Logger: testLogger(t),
	}
	var faults int
	chaosDone := make(chan struct{})
	go func() {
		defer close(chaosDone)
		faults = chaos.Run(runCtx)
	}()
	downDone := make(chan struct{})
	if !snapshots {
		close(downDone)
	} else {
		// Besides the chaos: a follower of each of two groups stays down
		// for a while of load.
		var down []string
		for _, g := range []string{"eu-west-1", "eu-west-3"} {
			down = append(down, followerOf(t, l, g))
		}
		go stopForSnapshots(t, l, down, downDone)
	}
	b := transfer(ctx, runCtx, c, accounts)
	<-chaosDone
	<-downDone
	if len(b.failures) > 0 {
		t.Fatalf("%d transfers failed, first: %v; the nodes:%s", len(b.failures), b.failures[0], describe(l))
	}
	waitLeaders(t, l)
	checkBalances(ctx, t, c, l, accounts, b)
	if faults == 0 {
		t.Errorf("no fault injected")
	}
	if n := chaos.RestartErrors(); n > 0 {
		t.Logf("%d restarts failed and were tried again", n)
	}
	checkReplicasAfterChaos(t, l)
	// Every replica of every group delivered every transaction, in orders
	// that agree (the ordering guarantees, checked on what the servers did).
	// Not genuineness: its notification rule needs the log's order to be
	// the order of events across groups, which separate files written by
	// concurrent servers do not give (the simulator checks it).
	if snapshots {
		// A replica that installed a snapshot did not log the deliveries
		// inside it: its log has gaps, so it is not checked.
		if n := l.SnapshotsRestored(""); n == 0 {
			t.Errorf("no replica caught up from a snapshot: the run did not exercise what it is for")
		} else {
			t.Logf("%s with snapshots: %d transfers acknowledged (%d moved money), %d faults, %d snapshots installed", proto, b.acked, b.moved, faults, n)
		}
		return
	}
	rep := checkLogs(t, l, logDir, false)
	t.Logf("%s: %d transfers acknowledged (%d moved money), %d faults; log: %s", proto, b.acked, b.moved, faults, rep.Summary())
}

// openAccounts opens bankAccountsPerPartition accounts in each of the six
// warehouses at bankOpening, and returns their keys.
func openAccounts(ctx context.Context, t *testing.T, c *client.Client) []string {
	t.Helper()
	var accounts []string
	for w := 1; w <= 6; w++ {
		for a := range bankAccountsPerPartition {
			accounts = append(accounts, fmt.Sprintf("w/%04d/acct/%d", w, a))
		}
	}
	for _, a := range accounts {
		if err := c.Put(ctx, []byte(a), []byte(strconv.Itoa(bankOpening))); err != nil {
			t.Fatalf("open %s: %v", a, err)
		}
	}
	return accounts
}

// stopForSnapshots stops the followers down for 3s of load, past two
// snapshot checks (every 2s) of their leaders, which meanwhile drop the
// entries they missed; it closes done once they run again. It runs on a
// goroutine of its own: it reports with t.Errorf and t.Logf only.
func stopForSnapshots(t *testing.T, l *Local, down []string, done chan<- struct{}) {
	defer close(done)
	for _, id := range down {
		if err := l.Stop(id); err != nil {
			t.Errorf("stop %s: %v", id, err)
		}
	}
	time.Sleep(3 * time.Second)
	// Whatever raft's own snapshot timer did meanwhile, each
	// leader snapshots now, dropping the entries its stopped
	// follower lacks: the follower must catch up from it.
	for _, id := range down {
		leader := l.Leader(l.Group(id))
		if leader == "" {
			continue // the chaos killed it: the next leader's log decides
		}
		if err := l.Snapshot(leader); err != nil {
			t.Logf("snapshot at %s: %v", leader, err)
		}
	}
	for _, id := range down {
		if err := l.Start(id); err != nil {
			t.Errorf("restart %s: %v", id, err)
		}
	}
}

// bankLedger is what the transfers of a bank run did: each account's
// change by acknowledged transfers, how many were acknowledged and moved
// money, and the calls that failed.
type bankLedger struct {
	delta        map[string]int64
	acked, moved int
	failures     []error
}

// transfer runs bankWorkers clients of random transfers between accounts,
// each guarded by an if on the source balance, until runCtx ends, and
// returns what they did.
func transfer(ctx, runCtx context.Context, c *client.Client, accounts []string) *bankLedger {
	var mu sync.Mutex
	b := &bankLedger{delta: make(map[string]int64)}
	var wg sync.WaitGroup
	for w := range bankWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 11))
			for runCtx.Err() == nil {
				from := accounts[rng.IntN(len(accounts))]
				to := accounts[rng.IntN(len(accounts))]
				if from == to {
					continue
				}
				amount := int64(1 + rng.IntN(60))
				tx := &txn.Txn{
					If: []txn.Compare{{Key: []byte(from), Cmp: txn.CmpGreaterEqual, Int: &amount}},
					Then: []txn.Op{
						{Kind: txn.OpAdd, Key: []byte(from), Int: -amount},
						{Kind: txn.OpAdd, Key: []byte(to), Int: amount},
					},
				}
				// Each transfer gets as long as it needs: a transfer whose
				// outcome is unknown would make the exact check impossible.
				callCtx, cancel := context.WithTimeout(ctx, time.Minute)
				res, err := c.Txn(callCtx, tx)
				cancel()
				mu.Lock()
				switch {
				case err != nil:
					b.failures = append(b.failures, err)
				default:
					b.acked++
					if res.Succeeded {
						b.moved++
						b.delta[from] -= amount
						b.delta[to] += amount
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return b
}

// checkBalances checks that the total is conserved, that no balance is
// negative, and that each account's balance is its opening balance plus
// the acknowledged transfers' changes in b.
func checkBalances(ctx context.Context, t *testing.T, c *client.Client, l *Local, accounts []string, b *bankLedger) {
	t.Helper()
	var total int64
	for _, a := range accounts {
		v, found, err := c.Get(ctx, []byte(a))
		if err != nil || !found {
			t.Fatalf("get %s: found %v, %v; the nodes:%s", a, found, err, describe(l))
		}
		bal, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil {
			t.Fatalf("%s = %q: %v", a, v, err)
		}
		if bal < 0 {
			t.Errorf("%s = %d: negative", a, bal)
		}
		if want := bankOpening + b.delta[a]; bal != want {
			t.Errorf("%s = %d, want %d (opening %d + acknowledged transfers %+d)", a, bal, want, bankOpening, b.delta[a])
		}
		total += bal
	}
	if want := int64(bankOpening * len(accounts)); total != want {
		t.Errorf("total %d, want %d", total, want)
	}
	if b.acked < 50 || b.moved == 0 {
		t.Errorf("only %d transfers acknowledged (%d moved money): the run proves little", b.acked, b.moved)
	}
}

// checkReplicasAfterChaos checks that every node runs again and that none
// skipped a log entry as malformed.
func checkReplicasAfterChaos(t *testing.T, l *Local) {
	t.Helper()
	for _, id := range l.Nodes() {
		if !l.Running(id) {
			t.Errorf("node %s is not running after the chaos", id)
		}
	}
	// No frame at all is malformed here: a replica that skipped one while
	// its group took it would have diverged.
	for id, n := range l.InvalidEntries() {
		if n != 0 {
			t.Errorf("node %s skipped %d log entries as malformed", id, n)
		}
	}
}
