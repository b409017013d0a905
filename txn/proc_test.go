package txn

import (
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// nopProc is a Procedure that does nothing.
type nopProc struct{}

func (nopProc) Keys([]byte) ([][]byte, error)       { return nil, nil }
func (nopProc) Run(*ProcPiece) (PieceResult, error) { return PieceResult{Succeeded: true}, nil }

// votingProc says through can whether a piece can abort.
type votingProc struct {
	nopProc
	can func(c *CallPiece) bool
}

func (p votingProc) CanAbort(c *CallPiece) bool { return p.can(c) }

func TestPieceCanAbort(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	c := &CallPiece{Group: 1, Dst: partition.SetOf(0, 1), Args: []byte("w/0003/a"), Partitions: pm}
	if !c.Owns([]byte("w/0003/a")) || c.Owns([]byte("w/0001/a")) || c.Owns([]byte("item/1")) || c.Owns([]byte("x/1")) {
		t.Error("CallPiece.Owns: group 1 owns w/0003/ alone")
	}
	owner := votingProc{can: func(c *CallPiece) bool { return c.Owns(c.Args) }}
	for _, tc := range []struct {
		name string
		p    Procedure
		c    *CallPiece
		want bool
	}{
		{"no PieceVotes: every piece can", nopProc{}, c, true},
		{"the owner of the key can", owner, c, true},
		{"another group cannot", owner, &CallPiece{Group: 0, Dst: c.Dst, Args: c.Args, Partitions: pm}, false},
		{"a panic is a yes", votingProc{can: func(c *CallPiece) bool { return c.Args[99] == 0 }}, c, true},
	} {
		if got := PieceCanAbort(tc.p, tc.c); got != tc.want {
			t.Errorf("%s: PieceCanAbort = %v, want %v", tc.name, got, tc.want)
		}
	}
}
