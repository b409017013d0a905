package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/txn"
)

// TestPartitionMovesUnderLoad moves partitions of a running cluster (TLS
// on) while concurrent transfers touch them, under each protocol (DESIGN
// 14): w0003 from eu-west-3 to eu-west-1 and back, and w0005 from
// eu-central-1 to eu-west-3. Every transfer succeeds (a request that
// touches a moving partition is refused as busy and retried; one routed by
// an older epoch's owners is refused as "epoch changed" and routed again),
// the balances match the acknowledged transfers, the delivery logs pass the
// checker, every replica ends at the last epoch with the new owners, the
// new owners' leaders counted the bytes they copied, and the old owners'
// stores hold no key of a partition they gave away.
func TestPartitionMovesUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	for _, proto := range []string{"flexcast", "skeen", "tree"} {
		t.Run(proto, func(t *testing.T) { runPartitionMoves(t, proto) })
	}
}

func runPartitionMoves(t *testing.T, proto string) {
	r := startBankRun(t, proto)
	cfg, l, dir, logDir, p, top, pm, ctx, c, accounts := r.cfg, r.l, r.dir, r.logDir, r.p, r.top, r.pm, r.ctx, r.c, r.accounts
	// w0003's rows fill chunks by bytes, w0005's (more than a chunk's
	// row limit, kv.ScanLimitMax) by rows.
	bulk := loadBulk(ctx, t, c, "w/0003/bulk/", 40, 1000)
	small := loadBulk(ctx, t, c, "w/0005/small/", kv.ScanLimitMax/txn.OpsMax+8, 8)

	moves := []struct{ part, to string }{{"w0003", "eu-west-1"}, {"w0005", "eu-west-3"}, {"w0003", "eu-west-3"}}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	var last uint64
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer stopRun()
		for _, mv := range moves {
			if err := sleepCtx(runCtx, 300*time.Millisecond); err != nil {
				t.Errorf("moves: %v", err)
				return
			}
			e, err := moveAndWait(runCtx, t, l, top.Name(p.ChangeEntry(top)), mv.part, mv.to)
			if err != nil {
				t.Errorf("move %s to %s: %v", mv.part, mv.to, err)
				return
			}
			last = e
		}
		// Some more transfers at the final owners.
		_ = sleepCtx(runCtx, 300*time.Millisecond)
	}()
	b := transfer(ctx, runCtx, c, accounts)
	<-done
	if len(b.failures) > 0 {
		t.Fatalf("%d transfers failed, first: %v", len(b.failures), b.failures[0])
	}
	if last != 1+2*uint64(len(moves)) {
		t.Fatalf("the moves reached epoch %d, want %d (two changes per move)", last, 1+2*len(moves))
	}
	waitEpoch(t, l, last)
	checkBalances(ctx, t, c, l, accounts, b)
	checkOwners(ctx, t, l, map[string]string{"w0003": "eu-west-3", "w0005": "eu-west-3", "w0001": "eu-west-1"})
	checkBulk(ctx, t, c, "w/0003/bulk/", bulk)
	checkBulk(ctx, t, c, "w/0005/small/", small)
	copied := testcluster.ScrapeHTTP(t, l.MetricsAddr()).Sum("flexkv_partition_move_bytes", nil)
	if copied == 0 {
		t.Errorf("flexkv_partition_move_bytes is 0: nothing was copied")
	}
	rep := checkLogs(t, l, logDir, false)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// The old owners deleted what they gave away, on every replica:
	// eu-west-1 w0003 (moved back from it), eu-central-1 w0005.
	for group, part := range map[string]string{"eu-west-1": "w0003", "eu-central-1": "w0005"} {
		pt, _ := pm.ByName(part)
		for _, gc := range cfg.Groups {
			if gc.Name != group {
				continue
			}
			for _, r := range gc.Replicas {
				st, err := kv.Open(kv.Options{Dir: filepath.Join(dir, r.ID, "kv")})
				if err != nil {
					t.Fatal(err)
				}
				rows, err := st.Scan(pt.Start, pt.End, 10)
				if cerr := st.Close(); err == nil {
					err = cerr
				}
				if err != nil || len(rows) > 0 {
					t.Errorf("replica %s of %s after giving %s away: %d rows left (first %q), %v", r.ID, group, part, len(rows), firstKey(rows), err)
				}
			}
		}
	}
	t.Logf("%s: %d moves (%d bytes copied in), %d transfers acknowledged (%d moved money) with no error, %d resubmitted for a changed epoch; log: %s",
		proto, len(moves), int64(copied), b.acked, b.moved, c.EpochResubmits(), rep.Summary())
}

// loadBulk writes txns transactions of txn.OpsMax rows under prefix, each
// value size bytes and its key, so that a move copies several chunks, and
// returns the values by key.
func loadBulk(ctx context.Context, t *testing.T, c *client.Client, prefix string, txns, size int) map[string]string {
	t.Helper()
	want := make(map[string]string)
	for i := range txns {
		tx := &txn.Txn{}
		for j := range txn.OpsMax {
			k := fmt.Sprintf("%s%06d", prefix, i*txn.OpsMax+j)
			v := strings.Repeat(string(rune('a'+j%26)), size) + k
			tx.Then = append(tx.Then, txn.Op{Kind: txn.OpPut, Key: []byte(k), Value: []byte(v)})
			want[k] = v
		}
		if _, err := c.Txn(ctx, tx); err != nil {
			t.Fatalf("bulk load: %v", err)
		}
	}
	return want
}

// checkBulk checks that the rows under prefix are exactly want.
func checkBulk(ctx context.Context, t *testing.T, c *client.Client, prefix string, want map[string]string) {
	t.Helper()
	got := make(map[string]string)
	from := []byte(prefix)
	end := []byte(prefix[:len(prefix)-1] + string(prefix[len(prefix)-1]+1))
	for {
		page, err := c.Scan(ctx, from, end, 1000)
		if err != nil {
			t.Fatalf("scan %s: %v", prefix, err)
		}
		for _, r := range page {
			got[string(r.Key)] = string(r.Value)
		}
		if len(page) < 1000 {
			break
		}
		from = append(slices.Clone(page[len(page)-1].Key), 0)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows under %s after the moves, want %d", len(got), prefix, len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("%s after the moves: %d bytes, want %d", k, len(got[k]), len(v))
		}
	}
}

func firstKey(rows []kv.KV) string {
	if len(rows) == 0 {
		return ""
	}
	return string(rows[0].Key)
}

// moveAndWait asks the group that takes the changes (entry) to move part
// to group to, and waits until a replica reports the move complete; it
// returns that replica's epoch.
func moveAndWait(ctx context.Context, t *testing.T, l *Local, entry, part, to string) (uint64, error) {
	for {
		err := callLeader(t, l, entry, func(kv apipb.KVClient) error {
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := kv.Reconfigure(cctx, &apipb.ReconfigureRequest{Move: &apipb.PartitionMove{Partition: part, To: to}})
			return err
		})
		if err == nil {
			break
		}
		if status.Code(err) == codes.FailedPrecondition && (strings.Contains(err.Error(), "under way") || strings.Contains(err.Error(), apipb.EpochChangedText)) {
			continue
		}
		return 0, err
	}
	for {
		var epoch uint64
		owner, moving := "", ""
		err := callLeader(t, l, to, func(kv apipb.KVClient) error {
			resp, err := kv.Topology(ctx, &apipb.TopologyRequest{})
			for _, p := range resp.GetPartitions() {
				if p.GetName() == part {
					owner, moving = p.GetGroup(), p.GetMovingTo()
				}
			}
			epoch = resp.GetEpoch()
			return err
		})
		if err != nil {
			return 0, err
		}
		if owner == to && moving == "" {
			return epoch, nil
		}
		if err := sleepCtx(ctx, 20*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// checkOwners checks that every replica's topology maps each partition of
// want to its group.
func checkOwners(ctx context.Context, t *testing.T, l *Local, want map[string]string) {
	t.Helper()
	for _, g := range []string{"eu-west-1", "eu-west-3", "eu-central-1"} {
		err := callLeader(t, l, g, func(kv apipb.KVClient) error {
			resp, err := kv.Topology(ctx, &apipb.TopologyRequest{})
			for _, p := range resp.GetPartitions() {
				if w, ok := want[p.GetName()]; ok && (p.GetGroup() != w || p.GetMovingTo() != "") {
					t.Errorf("group %s's leader maps %s to %s (moving to %q), want %s", g, p.GetName(), p.GetGroup(), p.GetMovingTo(), w)
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
}
