package simnet

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/multicast/tree"
	"github.com/flexkv/flexkv/partition"
)

// testTopology is groups A, B, C by rank, a tree rooted at A.
func testTopology(t testing.TB) *partition.Topology {
	t.Helper()
	top, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{{Name: "A"}, {Name: "B"}, {Name: "C"}},
		Parent: map[string]string{"B": "A", "C": "A"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func msg(client, seq uint64, dst ...partition.GroupID) multicast.Message {
	return multicast.Message{
		ID:      multicast.MsgID{Client: client, Seq: seq},
		Dst:     partition.SetOf(dst...),
		Payload: fmt.Appendf(nil, "payload %d.%d", client, seq),
	}
}

func treeCores(t *testing.T) *Cores[*tree.Core] {
	top := testTopology(t)
	return NewCores(t, top, func(g partition.GroupID) (*tree.Core, error) {
		return tree.New(tree.Config{Self: g, Topology: top})
	})
}

// TestCores runs the tree protocol's cores: requests accepted once each,
// refusals without a record, envelopes moved by link, every step checked,
// delivery orders recorded and verified, and a copy that moves on its own.
func TestCores(t *testing.T) {
	cs := treeCores(t)
	A, B, C := partition.GroupID(0), partition.GroupID(1), partition.GroupID(2)
	checked := 0
	cs.Check = func(g partition.GroupID, c *tree.Core, out multicast.Output) error {
		checked++
		if c != cs.Cores[g] {
			return errors.New("checked another group's core")
		}
		return nil
	}
	sends, dels, err := cs.Request(A, msg(1, 1, B, C))
	if err != nil || len(sends) != 2 || len(dels) != 0 {
		t.Fatalf("request at the root: %d sends, %d deliveries, %v; want 2, 0, nil", len(sends), len(dels), err)
	}
	if _, _, err := cs.Request(B, msg(1, 2, B, C)); !errors.Is(err, multicast.ErrNotEntry) {
		t.Fatalf("request away from its entry: got %v, want ErrNotEntry", err)
	}
	if _, _, err := cs.Request(A, msg(1, 1, B, C)); err != nil { // the same id again
		t.Fatal(err)
	}
	if len(cs.Msgs) != 1 {
		t.Fatalf("%d requests recorded, want the accepted one once", len(cs.Msgs))
	}
	// A tree core holds nothing but counters between steps: the copy may
	// share the cores.
	copied := cs.Clone(func(c *tree.Core) *tree.Core { return c })
	if _, dels := cs.Recv(A, B); len(dels) != 1 || dels[0].ID != msg(1, 1).ID {
		t.Fatalf("B delivered %v, want c1.1", dels)
	}
	cs.Drain()
	if got, want := cs.DescribeOrders(), "A: ; B: c1.1 c1.1; C: c1.1 c1.1"; got != want {
		t.Fatalf("orders %q, want %q", got, want)
	}
	if err := cs.Verify(true); err == nil || !strings.Contains(err.Error(), check.Integrity) {
		t.Fatalf("Verify of a message delivered twice: %v, want an integrity violation", err)
	}
	if checked != 6 {
		t.Fatalf("Check ran %d times, want once per step (6)", checked)
	}
	if got := copied.Busy(); len(got) != 2 || len(copied.Orders[B]) != 0 || len(copied.OrderIDs(C)) != 0 {
		t.Fatalf("the copy moved with the original: busy %v, orders %s", got, copied.DescribeOrders())
	}
	copied.Drain()
	if err := copied.Verify(false); err == nil {
		t.Fatal("the copy holds the same id twice: Verify passed")
	}
}

// TestCheckOrdersFindsViolations: the checker glue reports a disagreement, a
// cycle that no pair of groups shows, and a missing delivery.
func TestCheckOrdersFindsViolations(t *testing.T) {
	top := testTopology(t)
	m1, m2, m3, m4 := msg(1, 1, 0, 1), msg(1, 2, 1, 2), msg(1, 3, 0, 2), msg(1, 4, 0, 1)
	msgs := []multicast.Message{m1, m2, m3, m4}
	for _, tc := range []struct {
		name     string
		orders   [][]multicast.Message
		complete bool
		want     string
	}{
		{"pairwise disagreement", [][]multicast.Message{{m1, m4}, {m4, m1}, nil}, false, check.PrefixOrder},
		{"cycle", [][]multicast.Message{{m1, m3}, {m2, m1}, {m3, m2}}, false, check.AcyclicOrder},
		{"missing delivery", [][]multicast.Message{{m1, m3, m4}, {m1, m2, m4}, {m2}}, true, check.Agreement},
	} {
		err := CheckOrders(top, msgs, tc.orders, tc.complete)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want a %s violation", tc.name, err, tc.want)
		}
	}
	if err := CheckOrders(top, msgs, [][]multicast.Message{{m1, m3, m4}, {m1, m2, m4}, {m2, m3}}, true); err != nil {
		t.Errorf("a correct execution: %v", err)
	}
}
