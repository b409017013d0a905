package backup_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/backup"
	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/txn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testcluster.RaftFutureLeaks()...)
}

// Sizes of the bank: 12 accounts, two per partition of testcluster.Layout
// (three groups), each opened with bankOpening.
const (
	bankOpening = 100
	bankWorkers = 6
)

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

func startCluster(t *testing.T, cfg *partition.ClusterConfig, dir string) *cluster.Local {
	t.Helper()
	l, err := cluster.Start(cluster.Config{Cluster: cfg, Dir: dir, NoSync: true, Replication: replication.Config{ElectionTimeout: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	for _, g := range cfg.Groups {
		leaderOf(t, l, g.Name)
	}
	return l
}

// leaderOf waits for group g's leader (an election may be under way) and
// returns its node id.
func leaderOf(t *testing.T, l *cluster.Local, g string) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if id := l.Leader(g); id != "" {
			return id
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has no leader", g)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func accounts() []string {
	var out []string
	for w := 1; w <= 6; w++ {
		for a := range 2 {
			out = append(out, fmt.Sprintf("w/%04d/acct/%d", w, a))
		}
	}
	return out
}

// bank runs conditional transfers between random accounts until stop.
type bank struct {
	acked    atomic.Int64
	mu       sync.Mutex
	failures []error
	wg       sync.WaitGroup
}

func (b *bank) run(ctx, stop context.Context, c *client.Client) {
	accts := accounts()
	for w := range bankWorkers {
		b.wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 27))
			for stop.Err() == nil {
				from, to := accts[rng.IntN(len(accts))], accts[rng.IntN(len(accts))]
				if from == to {
					continue
				}
				amount := int64(1 + rng.IntN(60))
				tx := &txn.Txn{
					If:   []txn.Compare{{Key: []byte(from), Cmp: txn.CmpGreaterEqual, Int: &amount}},
					Then: []txn.Op{{Kind: txn.OpAdd, Key: []byte(from), Int: -amount}, {Kind: txn.OpAdd, Key: []byte(to), Int: amount}},
				}
				callCtx, cancel := context.WithTimeout(ctx, time.Minute)
				_, err := c.Txn(callCtx, tx)
				cancel()
				if err != nil {
					b.mu.Lock()
					b.failures = append(b.failures, err)
					b.mu.Unlock()
					continue
				}
				b.acked.Add(1)
			}
		})
	}
}

// waitAcked waits until n more transfers than now are acknowledged.
func (b *bank) waitAcked(t *testing.T, n int64) {
	t.Helper()
	want := b.acked.Load() + n
	deadline := time.Now().Add(time.Minute)
	for b.acked.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d transfers acknowledged in a minute", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// balances reads every account and returns their sum, failing on a
// negative one.
func balances(ctx context.Context, t *testing.T, c *client.Client) int64 {
	t.Helper()
	total := int64(0)
	for _, a := range accounts() {
		v, found, err := c.Get(ctx, []byte(a))
		if err != nil || !found {
			t.Fatalf("get %s: found %v, %v", a, found, err)
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			t.Fatalf("%s = %q (%v)", a, v, err)
		}
		total += n
	}
	return total
}

// TestBackupOfBankUnderLoad takes `backup create` of a cluster running
// transfers (TLS on), with the leader of a group killed and restarted while
// it runs, restores it into a fresh cluster on other addresses, and checks
// that the accounts sum to the conserved total there, that every group's
// applied index at the marker is the manifest's, and that the new cluster
// has a cluster id of its own and takes transactions. Then the bad inputs:
// a non-empty --to, a non-empty data directory, a configuration that maps
// partitions to other groups, a corrupted and a truncated file.
func TestBackupOfBankUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	for _, proto := range []string{"flexcast", "skeen", "tree"} {
		t.Run(proto, func(t *testing.T) { runBackupBank(t, proto) })
	}
}

func runBackupBank(t *testing.T, proto string) {
	cfg := testcluster.Layout(t, proto, testaddr.Backup)
	data := t.TempDir()
	l := startCluster(t, cfg, data)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, a := range accounts() {
		if err := c.Put(ctx, []byte(a), []byte(strconv.Itoa(bankOpening))); err != nil {
			t.Fatalf("open %s: %v", a, err)
		}
	}
	total := int64(bankOpening * len(accounts()))
	stop, stopLoad := context.WithCancel(ctx)
	b := &bank{}
	b.run(ctx, stop, c)
	defer func() { stopLoad(); b.wg.Wait() }()
	b.waitAcked(t, 30)

	// The leader of the second group dies as the backup starts, and comes
	// back a moment later.
	victim := leaderOf(t, l, cfg.Groups[1].Name)
	if err := l.Stop(victim); err != nil {
		t.Fatal(err)
	}
	restarted := make(chan error, 1)
	go func() {
		time.Sleep(time.Second)
		restarted <- l.Start(victim)
	}()
	dir := filepath.Join(t.TempDir(), "backup")
	m, err := backup.Create(ctx, backup.Options{Endpoints: l.Endpoints(), TLS: l.ClientTLS(), Dir: dir, Progress: testWriter{t}})
	if err != nil {
		t.Fatalf("backup create: %v", err)
	}
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	b.waitAcked(t, 30) // the load goes on after the backup
	stopLoad()
	b.wg.Wait()
	if len(b.failures) > 0 {
		t.Fatalf("%d transfers failed, first: %v", len(b.failures), b.failures[0])
	}
	if got := balances(ctx, t, c); got != total {
		t.Fatalf("the running cluster's total is %d, want %d", got, total)
	}
	checkMarkerIndexes(ctx, t, l, cfg, m)
	if _, err := backup.Verify(dir); err != nil {
		t.Fatalf("verify: %v", err)
	}
	restoreAndCheck(ctx, t, proto, dir, m, total)
	checkBadInput(t, proto, dir, l.Endpoints())
	checkOnlyRoot(ctx, t, l, data, m.Marker)
}

// checkOnlyRoot checks that a user other than root, with a certificate of
// the cluster's CA, may neither take a backup nor drop one.
func checkOnlyRoot(ctx context.Context, t *testing.T, l *cluster.Local, data, marker string) {
	t.Helper()
	ca, err := certs.LoadCA(cluster.CertsDir(data), filepath.Join(data, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	mine := t.TempDir()
	if _, err := ca.CreateClient(mine, "alice", certs.Options{}); err != nil {
		t.Fatal(err)
	}
	caCert, err := os.ReadFile(filepath.Join(cluster.CertsDir(data), certs.CAFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mine, certs.CAFile), caCert, 0o644); err != nil {
		t.Fatal(err)
	}
	alice, err := client.LoadTLS(mine, "alice")
	if err != nil {
		t.Fatal(err)
	}
	o := backup.Options{Endpoints: l.Endpoints(), TLS: alice, Dir: filepath.Join(t.TempDir(), "b")}
	want := `user "alice" may not back up the cluster: only "root" may`
	if _, err := backup.Create(ctx, o); err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "PermissionDenied") {
		t.Errorf("backup create as alice: %v, want PermissionDenied: %s", err, want)
	}
	if err := backup.Drop(ctx, o, marker); err == nil {
		t.Error("backup drop as alice: no error")
	}
}

// checkMarkerIndexes checks that the index of every group's copy in the
// manifest is the one at which the group ran the marker, as every replica
// of the group reports it.
func checkMarkerIndexes(ctx context.Context, t *testing.T, l *cluster.Local, cfg *partition.ClusterConfig, m *backup.Manifest) {
	t.Helper()
	var client, seq uint64
	if _, err := fmt.Sscanf(m.Marker, "c%d.%d", &client, &seq); err != nil {
		t.Fatalf("marker %q: %v", m.Marker, err)
	}
	for _, g := range cfg.Groups {
		copied, ok := m.Group(g.Name)
		if !ok {
			t.Fatalf("the manifest has no copy of group %s", g.Name)
		}
		addr, leader := "", leaderOf(t, l, g.Name)
		for _, r := range g.Replicas {
			if r.ID == leader {
				addr = r.GRPC
			}
		}
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(l.ClientTLS())))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := apipb.NewKVClient(cc).Await(ctx, &apipb.AwaitRequest{ClientId: client, Seq: seq})
		cc.Close()
		if err != nil {
			t.Fatalf("group %s: await the marker: %v", g.Name, err)
		}
		res := resp.GetPiece().GetResults()
		if len(res) != 1 || string(res[0].GetValue()) != strconv.FormatUint(copied.AppliedIndex, 10) {
			t.Errorf("group %s ran the marker at %v, the manifest says %d", g.Name, res, copied.AppliedIndex)
		}
	}
}

// restoreAndCheck restores the backup into a fresh cluster on new
// addresses and checks its accounts.
func restoreAndCheck(ctx context.Context, t *testing.T, proto, dir string, m *backup.Manifest, total int64) {
	t.Helper()
	cfg := testcluster.Layout(t, proto, testaddr.Backup)
	data := t.TempDir()
	ids := map[string]bool{}
	for _, id := range cfg.ReplicaIDs() {
		_, cid, err := backup.Restore(backup.RestoreOptions{From: dir, Config: cfg, Node: id, DataDir: filepath.Join(data, id)})
		if err != nil {
			t.Fatalf("restore %s: %v", id, err)
		}
		ids[cid] = true
	}
	if len(ids) != 1 || ids[m.ClusterID] {
		t.Errorf("restored cluster ids %v, want one, not the backup's %s", ids, m.ClusterID)
	}
	l := startCluster(t, cfg, data)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := balances(ctx, t, c); got != total {
		t.Errorf("the restored cluster's total is %d, want %d", got, total)
	}
	one := int64(1)
	res, err := c.Txn(ctx, &txn.Txn{
		If:   []txn.Compare{{Key: []byte("w/0001/acct/0"), Cmp: txn.CmpGreaterEqual, Int: &one}},
		Then: []txn.Op{{Kind: txn.OpAdd, Key: []byte("w/0001/acct/0"), Int: -1}, {Kind: txn.OpAdd, Key: []byte("w/0006/acct/1"), Int: 1}},
		Else: []txn.Op{{Kind: txn.OpAdd, Key: []byte("w/0006/acct/1"), Int: -1}, {Kind: txn.OpAdd, Key: []byte("w/0001/acct/0"), Int: 1}},
	})
	if err != nil {
		t.Fatalf("a transfer on the restored cluster: %v", err)
	}
	_ = res
	if got := balances(ctx, t, c); got != total {
		t.Errorf("the restored cluster's total after a transfer is %d, want %d", got, total)
	}
}

// checkBadInput checks the refusals, on a copy of the backup in dir.
func checkBadInput(t *testing.T, proto, dir string, endpoints []string) {
	t.Helper()
	if _, err := backup.Create(context.Background(), backup.Options{Endpoints: endpoints, Dir: dir}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("create into a non-empty directory: %v", err)
	}
	cfg := testcluster.Layout(t, proto, testaddr.Backup)
	node := cfg.Groups[0].Replicas[0].ID
	full := t.TempDir()
	if err := os.WriteFile(filepath.Join(full, "x"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, _, err := backup.Restore(backup.RestoreOptions{From: dir, Config: cfg, Node: node, DataDir: full}); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("restore into a non-empty data directory: %v", err)
	}
	moved := testcluster.Layout(t, proto, testaddr.Backup)
	moved.Partitions[0].Group = moved.Groups[2].Name
	_, _, err := backup.Restore(backup.RestoreOptions{From: dir, Config: moved, Node: node, DataDir: filepath.Join(t.TempDir(), "d")})
	if err == nil || !strings.Contains(err.Error(), "partition w0001 belongs to group eu-west-1 in the backup, eu-central-1 in the configuration") {
		t.Errorf("restore with partition w0001 moved: %v", err)
	}
	m, err := backup.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Groups[1]
	var largest backup.File
	for _, f := range g.Files {
		if f.Size > largest.Size {
			largest = f
		}
	}
	path := filepath.Join(dir, g.Name, filepath.FromSlash(largest.Path))
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, problem string
		content       []byte
	}{
		{"corrupted", "corrupted", append(append([]byte{}, orig[:len(orig)/2]...), append([]byte{orig[len(orig)/2] ^ 0xff}, orig[len(orig)/2+1:]...)...)},
		{"truncated", "truncated", orig[:len(orig)-1]},
	} {
		if err := os.WriteFile(path, tc.content, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := backup.Verify(dir)
		var fe *backup.FileError
		if !errors.As(err, &fe) || fe.Problem != tc.problem || fe.Path != largest.Path || fe.Group != g.Name {
			t.Errorf("%s file: verify says %v, want %s %s/%s", tc.name, err, tc.problem, g.Name, largest.Path)
		}
		_, _, err = backup.Restore(backup.RestoreOptions{From: dir, Config: cfg, Node: node, DataDir: filepath.Join(t.TempDir(), "d")})
		if err == nil || !strings.Contains(err.Error(), largest.Path) || !strings.Contains(err.Error(), tc.problem) {
			t.Errorf("%s file: restore says %v", tc.name, err)
		}
	}
	if err := os.WriteFile(path, orig, 0o644); err != nil {
		t.Fatal(err)
	}
}
