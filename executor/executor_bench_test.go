package executor

import (
	"fmt"
	"testing"

	"github.com/flexkv/flexkv/group"
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

// BenchmarkExecuteLocalSession is BenchmarkExecuteLocal under one session:
// each entry stores the session's result and deletes the one before,
// which the delivery acknowledges.
func BenchmarkExecuteLocalSession(b *testing.B) {
	c := newCluster(b, nil)
	c.seed(0, map[string]string{"w/0001/acct": "1000000000"})
	m := c.sessionMsg(group.SessionID(0, 1), 0, designTransfer)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		m.ID.Seq = uint64(i + 1)
		c.execute(0, []multicast.Message{m}, nil)
	}
	if st := c.reps[0].ex.Stats(); st.SessionResults != 1 {
		b.Fatalf("%d session results kept, want 1", st.SessionResults)
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

// BenchmarkExecutePipelined keeps many two-group transfers in flight, on
// distinct accounts: each round delivers inflight transfers to both groups
// and exchanges their votes, in three entries when pieces vote and run
// without waiting for the ones ahead of them. It reports the cost per
// transfer (both groups' work), and the raft entries per transfer: each is
// a consensus round, and a vote's trip between groups takes two, which is
// what bounds throughput across a WAN.
func BenchmarkExecutePipelined(b *testing.B) {
	const inflight = 64
	c := newCluster(b, nil)
	seed := map[string]string{}
	for i := range inflight {
		seed[fmt.Sprintf("w/0001/a%d", i)] = "1000000000"
	}
	c.seed(0, seed)
	tx := make([]multicast.Message, inflight)
	for i := range tx {
		tx[i] = c.msg(0, fmt.Sprintf(`{"if":[{"key":"w/0001/a%d","cmp":">=","int":5}],`+
			`"then":[{"op":"add","key":"w/0001/a%d","int":-5},{"op":"add","key":"w/0003/a%d","int":5}]}`, i, i, i))
		if tx[i].Dst != partition.SetOf(0, 1) {
			b.Fatalf("destinations %s", tx[i].Dst)
		}
	}
	b.ReportAllocs()
	seq := uint64(0)
	entries := c.reps[0].index + c.reps[1].index
	for b.Loop() {
		for i := range tx {
			seq++
			tx[i].ID.Seq = seq
		}
		c.deliver(0, tx...)
		c.deliver(1, tx...)
		c.settle()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*inflight), "ns/txn")
	b.ReportMetric(float64(c.reps[0].index+c.reps[1].index-entries)/float64(b.N*inflight), "entries/txn")
	for g := range 2 {
		if st := c.reps[g].ex.Stats(); st.Queued != 0 || st.Executed != seq {
			b.Fatalf("group %d stats %+v, want %d executed", g, st, seq)
		}
	}
}
