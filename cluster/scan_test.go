package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// scanBytesMax is the scan byte bound of scanGroups' cluster: small, so
// that a few keys pass it.
const scanBytesMax = 256

// scanGroups is a cluster of three groups of one replica each, g1 < g2 <
// g3, owning w/0001/, w/0002/ and w/0003/ in that order, and w/0004/ owned
// by g1 again, so that a range comes back to a group it left.
func scanGroups(t *testing.T) *partition.ClusterConfig {
	t.Helper()
	cfg := &partition.ClusterConfig{Protocol: "flexcast"}
	free := func() string { return testaddr.Free(t, testaddr.Cluster) }
	for i, name := range []string{"g1", "g2", "g3"} {
		cfg.Groups = append(cfg.Groups, partition.GroupConfig{Name: name, Region: name, Replicas: []partition.ReplicaConfig{
			{ID: fmt.Sprintf("r%d", i+1), Raft: free(), GRPC: free(), Peer: free()},
		}})
	}
	for i, g := range []string{"g1", "g2", "g3", "g1"} {
		cfg.Partitions = append(cfg.Partitions, partition.PartitionConfig{
			Name: fmt.Sprintf("w%04d", i+1), Start: fmt.Sprintf("w/%04d/", i+1), End: fmt.Sprintf("w/%04d/", i+2), Group: g,
		})
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	return cfg
}

func keysOf(kvs []txn.KV) string {
	var out []string
	for _, kv := range kvs {
		out = append(out, string(kv.Key))
	}
	return strings.Join(out, " ")
}

// TestScanAcrossPartitions writes keys in partitions of three groups and
// scans across them (TLS on, as every cluster of this package): the Go
// client part by part, a raw gRPC client at g2's replica page by page,
// each page inside one partition and next_start moving across the
// boundaries, and consistently, in one transaction; past the byte bound a
// consistent scan fails naming it.
func TestScanAcrossPartitions(t *testing.T) {
	l := startLocalConfig(t, Config{Cluster: scanGroups(t), Dir: t.TempDir(), ScanBytesMax: scanBytesMax})
	ctx := ctxTimeout(t, 90*time.Second)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var all []string
	for p := 1; p <= 4; p++ {
		for i := range 3 {
			k := fmt.Sprintf("w/%04d/k%d", p, i)
			all = append(all, k)
			if err := c.Put(ctx, []byte(k), []byte("v"+k[2:6])); err != nil {
				t.Fatal(err)
			}
		}
	}
	whole := strings.Join(all, " ")
	for _, tc := range []struct {
		start, end string
		limit      int
		want       string
	}{
		{"w/0001/", "w/0005/", 0, whole},
		{"w/", "x", 100, whole}, // starts and ends outside every partition
		{"w/0001/k1", "w/0003/k1", 0, strings.Join(all[1:7], " ")},
		{"w/0001/", "w/0005/", 7, strings.Join(all[:7], " ")},
		{"w/0002/k2", "w/0005/", 2, "w/0002/k2 w/0003/k0"},
	} {
		kvs, err := c.Scan(ctx, []byte(tc.start), []byte(tc.end), tc.limit)
		if got := keysOf(kvs); err != nil || got != tc.want {
			t.Errorf("Scan(%s, %s, %d) = %q, %v; want %q", tc.start, tc.end, tc.limit, got, err, tc.want)
		}
		kvs, err = c.ScanConsistent(ctx, []byte(tc.start), []byte(tc.end), tc.limit)
		if got := keysOf(kvs); err != nil || got != tc.want {
			t.Errorf("ScanConsistent(%s, %s, %d) = %q, %v; want %q", tc.start, tc.end, tc.limit, got, err, tc.want)
		}
		for _, kv := range kvs {
			if string(kv.Value) != "v"+string(kv.Key[2:6]) {
				t.Errorf("ScanConsistent: %s = %q", kv.Key, kv.Value)
			}
		}
	}
	checkRawScanPages(ctx, t, l, whole)
	checkConsistentScanBound(ctx, t, l, c)
}

// checkRawScanPages pages through [w/0001/, w/0005/) at g2's replica with
// a raw client that does not route itself: the replica forwards each
// partition's page to its group, every page lies in one partition, and the
// pages hold every key once, in order; a consistent scan there is
// forwarded to its entry group, g1, and answered whole.
func checkRawScanPages(ctx context.Context, t *testing.T, l *Local, whole string) {
	t.Helper()
	_, r2, _ := l.cfg.Cluster.Replica("r2")
	kv := rawKV(t, l, r2.GRPC)
	var keys []string
	var starts []string
	from := []byte("w/0001/")
	for pages := 0; len(from) > 0; pages++ {
		if pages == 20 {
			t.Fatalf("scan still going after 20 pages, at %q", from)
		}
		starts = append(starts, string(from))
		resp, err := kv.Scan(ctx, &apipb.ScanRequest{Start: from, End: []byte("w/0005/"), Limit: 100})
		if err != nil {
			t.Fatalf("scan from %q at r2: %v", from, err)
		}
		for _, e := range resp.GetKvs() {
			if !bytes.HasPrefix(e.GetKey(), from[:7]) {
				t.Errorf("page from %q holds %q, of another partition", from, e.GetKey())
			}
			keys = append(keys, string(e.GetKey()))
		}
		from = resp.GetNextStart()
	}
	if got := strings.Join(keys, " "); got != whole {
		t.Errorf("raw scan at r2: %q, want %q", got, whole)
	}
	if got, want := strings.Join(starts, " "), "w/0001/ w/0002/ w/0003/ w/0004/"; got != want {
		t.Errorf("raw scan at r2: pages from %s, want %s", got, want)
	}
	resp, err := kv.Scan(ctx, &apipb.ScanRequest{Start: []byte("w/0001/"), End: []byte("w/0005/"), Consistent: true})
	if err != nil || len(resp.GetNextStart()) > 0 {
		t.Fatalf("consistent scan at r2: %v, %v", resp, err)
	}
	if got := keysOf(api.KVsFromProto(resp.GetKvs())); got != whole {
		t.Errorf("consistent scan at r2: %q, want %q", got, whole)
	}
	// Bad input, refused before anything runs.
	for _, bad := range []struct {
		req  *apipb.ScanRequest
		want string
	}{
		{&apipb.ScanRequest{Start: []byte("w/0003/"), End: []byte("w/0001/")}, `server: scan: partition: range ["w/0003/", "w/0001/"): end is not after start`},
		{&apipb.ScanRequest{Start: []byte("x"), End: []byte("y"), Consistent: true}, `range ["x", "y"): no partition overlaps it`},
		{&apipb.ScanRequest{Start: []byte("w/0001/"), End: []byte("w/0005/"), Consistent: true, Stale: true}, "consistent and stale both set"},
	} {
		_, err := kv.Scan(ctx, bad.req)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("scan %v: %v, want InvalidArgument with %q", bad.req, err, bad.want)
		}
	}
}

// checkConsistentScanBound: a consistent scan whose keys and values pass
// the cluster's scan byte bound fails, naming it, and returns nothing; a
// narrower one fits, and a plain scan pages the whole.
func checkConsistentScanBound(ctx context.Context, t *testing.T, l *Local, c *client.Client) {
	t.Helper()
	big := strings.Repeat("b", scanBytesMax)
	if err := c.Put(ctx, []byte("w/0003/big"), []byte(big)); err != nil {
		t.Fatal(err)
	}
	kvs, err := c.ScanConsistent(ctx, []byte("w/0001/"), []byte("w/0005/"), 0)
	if !errors.Is(err, client.ErrScanTooLarge) || status.Code(err) != codes.OutOfRange ||
		!strings.Contains(err.Error(), fmt.Sprintf("more than the scan byte bound (%d, server.Config.ScanBytesMax)", scanBytesMax)) || kvs != nil {
		t.Errorf("consistent scan past the bound: %d keys, %v; want ErrScanTooLarge, OutOfRange naming the bound", len(kvs), err)
	}
	if kvs, err := c.ScanConsistent(ctx, []byte("w/0001/"), []byte("w/0005/"), 6); err != nil || len(kvs) != 6 {
		t.Errorf("consistent scan of 6 keys, before the big one: %d keys, %v", len(kvs), err)
	}
	if kvs, err := c.Scan(ctx, []byte("w/0001/"), []byte("w/0005/"), 0); err != nil || len(kvs) != 13 {
		t.Errorf("plain scan with the big value: %d keys, %v; want 13 in pages", len(kvs), err)
	}
	if err := c.Delete(ctx, []byte("w/0003/big")); err != nil {
		t.Fatal(err)
	}
}

// TestConsistentScanSeesACut: while transfers move units between the
// accounts of three partitions of three groups, every consistent scan of
// the accounts sums to the total: it reads one cut, and never sees a
// transfer half done. (Plain scans, a partition at a time, may; they are
// counted, not checked.)
func TestConsistentScanSeesACut(t *testing.T) {
	l := startLocalConfig(t, Config{Cluster: scanGroups(t), Dir: t.TempDir()})
	ctx := ctxTimeout(t, 120*time.Second)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const accounts, balance = 3, 100
	acct := func(i int) []byte { return fmt.Appendf(nil, "w/%04d/acct", i+1) }
	for i := range accounts {
		if err := c.Put(ctx, acct(i), []byte(strconv.Itoa(balance))); err != nil {
			t.Fatal(err)
		}
	}
	sum := func(kvs []txn.KV) (int, error) {
		if len(kvs) != accounts {
			return 0, fmt.Errorf("%d accounts: %s", len(kvs), keysOf(kvs))
		}
		total := 0
		for _, kv := range kvs {
			n, err := strconv.Atoi(string(kv.Value))
			if err != nil {
				return 0, err
			}
			total += n
		}
		return total, nil
	}

	stop := make(chan struct{})
	var transfers atomic.Int64
	var wg sync.WaitGroup
	// The transfers end before the test does, however it ends.
	halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
	defer halt()
	for w := range accounts {
		wg.Go(func() {
			from, to := acct(w), acct((w+1)%accounts)
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, err := c.Txn(ctx, &txn.Txn{Then: []txn.Op{
					{Kind: txn.OpAdd, Key: from, Int: -1, Wrap: true},
					{Kind: txn.OpAdd, Key: to, Int: 1, Wrap: true},
				}})
				if err != nil {
					t.Errorf("transfer %s -> %s: %v", from, to, err)
					return
				}
				transfers.Add(1)
			}
		})
	}
	halfDone := 0
	const scans = 40
	for i := range scans {
		kvs, err := c.ScanConsistent(ctx, []byte("w/0001/acct"), []byte("w/0003/acct0"), 0)
		if err != nil {
			t.Fatalf("consistent scan %d: %v", i, err)
		}
		if total, err := sum(kvs); err != nil || total != accounts*balance {
			t.Fatalf("consistent scan %d (after %d transfers): total %d, %v; want %d: not a cut", i, transfers.Load(), total, err, accounts*balance)
		}
		kvs, err = c.Scan(ctx, []byte("w/0001/acct"), []byte("w/0003/acct0"), 0)
		if err != nil {
			t.Fatalf("plain scan %d: %v", i, err)
		}
		if total, err := sum(kvs); err != nil || total != accounts*balance {
			halfDone++
		}
	}
	halt()
	if transfers.Load() == 0 {
		t.Fatal("no transfer ran while the scans did: nothing was checked")
	}
	t.Logf("%d consistent scans, each a cut, during %d transfers; %d of %d plain scans saw a transfer half done", scans, transfers.Load(), halfDone, scans)
}
