package cluster

import (
	"testing"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/server"
	"github.com/flexkv/flexkv/txn"
)

// TestTrafficOverhead: under the tree protocol a transaction for eu-west-3
// and eu-central-1 enters at their tree-lca, the root eu-west-1, which
// receives it and forwards it without delivering it (DESIGN 3.4's
// overhead), while under FlexCast only the destinations receive it. The
// counts of Local.Traffic tell the two apart.
func TestTrafficOverhead(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	for _, tc := range []struct {
		proto        string
		rootReceives bool
	}{
		{"tree", true},
		{"flexcast", false},
	} {
		t.Run(tc.proto, func(t *testing.T) {
			l := startLocal(t, testcluster.Layout(t, tc.proto, testaddr.Cluster), t.TempDir())
			ctx := ctxTimeout(t, time.Minute)
			c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// w/0003/ is eu-west-3's, w/0005/ eu-central-1's.
			tx := &txn.Txn{Then: []txn.Op{{Kind: txn.OpPut, Key: []byte("w/0003/k"), Value: []byte("a")}, {Kind: txn.OpPut, Key: []byte("w/0005/k"), Value: []byte("b")}}}
			if _, err := c.Txn(ctx, tx); err != nil {
				t.Fatal(err)
			}
			// A group receives the requests it accepted (every replica
			// counts them) and the payloads sent to it (counted once, by
			// the sender's leader).
			var received, delivered map[string]uint64
			var traffic map[string]server.Traffic
			count := func() {
				received, delivered = map[string]uint64{}, map[string]uint64{}
				traffic = l.Traffic()
				for id, tr := range traffic {
					g := l.Group(id)
					received[g] = max(received[g], tr.Requests)
					delivered[g] = max(delivered[g], tr.Deliveries)
				}
			}
			// The answer comes from the first destination to release
			// its piece (DESIGN 6.6): the other may deliver later.
			waitFor(t, "both destinations to deliver", func() bool {
				count()
				return delivered["eu-west-3"] > 0 && delivered["eu-central-1"] > 0
			})
			// The step of the latency model: timed at the replica that
			// proposed the request, when it delivers it (FlexCast's lca
			// is a destination; the tree's root here is not).
			var steps, stepNanos uint64
			for _, tr := range traffic {
				steps += tr.Steps
				stepNanos += tr.StepNanos
			}
			if wantSteps := map[bool]uint64{true: 0, false: 1}[tc.rootReceives]; steps != wantSteps || (steps > 0) != (stepNanos > 0) {
				t.Errorf("%d requests timed from proposal to delivery (%d ns), want %d", steps, stepNanos, wantSteps)
			}
			var msgBytes uint64
			for id, tr := range traffic {
				for to, n := range tr.PayloadTo {
					received[to] += n
				}
				var sum uint64
				for _, b := range tr.BytesByKind {
					sum += b
				}
				if sum != tr.SendBytes {
					t.Errorf("%s: bytes by kind %v add up to %d, sent %d", id, tr.BytesByKind, sum, tr.SendBytes)
				}
				msgBytes += tr.BytesByKind["msg"]
			}
			// The transaction's payload travels as a msg (FlexCast's
			// lca to the other destination, the tree's root to its
			// children).
			if msgBytes == 0 {
				t.Errorf("no msg bytes sent: %v", traffic)
			}
			if got := received["eu-west-1"] > 0; got != tc.rootReceives {
				t.Errorf("eu-west-1 received %d payload messages, delivered %d", received["eu-west-1"], delivered["eu-west-1"])
			}
			if delivered["eu-west-1"] != 0 {
				t.Errorf("eu-west-1 delivered %d messages, not a destination of any", delivered["eu-west-1"])
			}
			for _, g := range []string{"eu-west-3", "eu-central-1"} {
				if received[g] == 0 || delivered[g] != 1 {
					t.Errorf("%s received %d and delivered %d, want at least 1 and exactly 1", g, received[g], delivered[g])
				}
			}
		})
	}
}
