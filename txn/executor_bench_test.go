package txn

import (
	"testing"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// BenchmarkExecuteLocal executes one single-group transfer per entry.
func BenchmarkExecuteLocal(b *testing.B) {
	c := newCluster(b, nil)
	c.seed(0, map[string]string{"w/0001/acct": "1000000000"})
	m := c.msg(0, designTransfer)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.ID.Seq = uint64(i + 1)
		c.execute(0, []multicast.Message{m}, nil)
	}
}

// BenchmarkExecuteVoted executes a two-group transfer per entry at both
// groups, with the vote exchange: three entries per transaction.
func BenchmarkExecuteVoted(b *testing.B) {
	c := newCluster(b, nil)
	c.seed(0, map[string]string{"w/0001/acct": "1000000000"})
	m := c.msg(0, `{"if":[{"key":"w/0001/acct","cmp":">=","int":5}],"then":[{"op":"add","key":"w/0001/acct","int":-5},{"op":"add","key":"w/0003/acct","int":5}]}`)
	if m.Dst != partition.SetOf(0, 1) {
		b.Fatalf("destinations %s", m.Dst)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.ID.Seq = uint64(i + 1)
		c.deliver(0, m)
		c.deliver(1, m)
		c.deliver(0)
	}
	if st := c.reps[1].ex.Stats(); st.Queued != 0 {
		b.Fatalf("group 1 stats %+v", st)
	}
}
