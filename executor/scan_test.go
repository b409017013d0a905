package executor

import (
	"testing"

	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// A scan that spans partitions of three groups runs at each of them over
// the parts it owns, and nothing else of its store: a key left in a range
// the group does not own (here planted by hand, as a partition moved away
// before its old owner deletes it) is not reported. The merge holds the
// first Limit keys of the whole range, in key order.
func TestExecutorScanAcrossGroups(t *testing.T) {
	c := newCluster(t, nil)
	c.seed(0, map[string]string{"w/0001/a": "1a", "w/0002/a": "2a", "w/0003/stale": "old", "item/1": "i1"})
	c.seed(1, map[string]string{"w/0003/a": "3a", "w/0003/b": "3b", "item/1": "i1"})
	c.seed(2, map[string]string{"w/0004/a": "4a", "item/1": "i1"})
	for _, tc := range []struct {
		scan   string
		dst    partition.GroupSet
		pieces [3]string
		merged string
	}{
		{`{"op":"scan","key":"item/","end":"w/0005/","limit":100}`, partition.SetOf(0, 1, 2),
			[3]string{"0:scan [item/1=i1 w/0001/a=1a w/0002/a=2a]", "0:scan [w/0003/a=3a w/0003/b=3b]", "0:scan [w/0004/a=4a]"},
			"0:scan [item/1=i1 w/0001/a=1a w/0002/a=2a w/0003/a=3a w/0003/b=3b w/0004/a=4a]"},
		{`{"op":"scan","key":"w/0002/","end":"w/0004/~","limit":2}`, partition.SetOf(0, 1, 2),
			[3]string{"0:scan [w/0002/a=2a]", "0:scan [w/0003/a=3a w/0003/b=3b]", "0:scan [w/0004/a=4a]"},
			"0:scan [w/0002/a=2a w/0003/a=3a]"},
	} {
		t.Run(tc.scan, func(t *testing.T) {
			tx := mustParse(t, `{"then":[`+tc.scan+`]}`)
			m := c.msg(uint64(len(tc.scan)), `{"then":[`+tc.scan+`]}`)
			if m.Dst != tc.dst {
				t.Fatalf("destinations %s, want %s", m.Dst, tc.dst)
			}
			var prs []txn.PieceResult
			for _, g := range m.Dst.Slice() {
				if sends := c.deliver(g, m); len(sends) != 0 {
					t.Errorf("group %d sent %d votes for a read-only scan", g, len(sends))
				}
				r := c.result(g, m)
				if got := describeResults(r.Results); got != tc.pieces[g] {
					t.Errorf("group %d reports %s, want %s", g, got, tc.pieces[g])
				}
				prs = append(prs, r)
			}
			res, err := tx.MergeResults(m.ID.String(), prs)
			if err != nil {
				t.Fatal(err)
			}
			if got := describeResults(res.Results); got != tc.merged {
				t.Errorf("merged %s, want %s", got, tc.merged)
			}
		})
	}
}

// A stored procedure's piece may scan a range across the partitions its
// group holds; one that reaches another group's partition aborts, as it
// could not read it whole.
func TestExecutorProcedureScanAcrossPartitions(t *testing.T) {
	r := testRegistry(t)
	wide := func(end string) funcProc {
		return funcProc{fixedKeys("w/0001/a"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
			kvs, err := p.Reader.Scan([]byte("w/0001/"), []byte(end), 3)
			if err != nil {
				return txn.PieceResult{}, err
			}
			return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{{Index: 0, Kind: txn.OpScan, Key: []byte("w/0001/"), KVs: kvs}}}, nil
		}}
	}
	if err := r.Register("scan.own", wide("w/0003/")); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("scan.theirs", wide("w/0003/b")); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, r)
	c.seed(0, map[string]string{"w/0001/a": "1a", "w/0002/a": "2a", "w/0002/b": "2b", "w/0002/c": "2c"})
	for _, tc := range []struct {
		name string
		seq  uint64
		want string
	}{
		{"scan.own", 1, "succeeded true: 0:scan [w/0001/a=1a w/0002/a=2a w/0002/b=2b]"},
		{"scan.theirs", 2, `aborted: txn: procedure "scan.theirs": txn: scan ["w/0001/", "w/0003/b") reaches partition w0003 ["w/0003/", "w/0004/") group 1, which group 0 does not hold`},
	} {
		m := c.callMsg(tc.seq, tc.name, "")
		c.deliver(0, m)
		if got := describeResult(c.result(0, m)); got != tc.want {
			t.Errorf("%s: %s\nwant %s", tc.name, got, tc.want)
		}
	}
}
