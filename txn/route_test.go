package txn

import (
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// In testPartitionMap, group 0 owns w/0001/ and w/0002/, group 1 w/0003/,
// group 2 w/0004/, and item/ is replicated.

func TestDestinations(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	tests := []struct {
		name string
		json string
		home partition.GroupID
		want partition.GroupSet
	}{
		{"one partition", `{"then":[{"op":"get","key":"w/0001/a"}]}`, 2, partition.SetOf(0)},
		{"two partitions of one group", `{"then":[{"op":"put","key":"w/0001/a","value":"x"},{"op":"get","key":"w/0002/a"}]}`, 2, partition.SetOf(0)},
		{"transfer between groups", `{"if":[{"key":"w/0001/a","cmp":">=","int":5}],"then":[{"op":"add","key":"w/0001/a","int":-5},{"op":"add","key":"w/0003/a","int":5}]}`, 2, partition.SetOf(0, 1)},
		{"compare key counts", `{"if":[{"key":"w/0004/a","cmp":"=","int":1}],"then":[{"op":"get","key":"w/0001/a"}]}`, 1, partition.SetOf(0, 2)},
		{"else branch counts", `{"if":[{"key":"w/0001/a","cmp":"=","int":1}],"else":[{"op":"delete","key":"w/0003/a"}]}`, 2, partition.SetOf(0, 1)},
		{"replicated read alone goes home", `{"then":[{"op":"get","key":"item/1"},{"op":"scan","key":"item/1","end":"item/9","limit":3}]}`, 2, partition.SetOf(2)},
		{"replicated compare alone goes home", `{"if":[{"key":"item/1","cmp":"=","value":"x"}]}`, 1, partition.SetOf(1)},
		{"replicated read with an owned key", `{"then":[{"op":"get","key":"item/1"},{"op":"put","key":"w/0003/a","value":"x"}]}`, 2, partition.SetOf(1)},
		{"replicated write goes everywhere", `{"then":[{"op":"get","key":"w/0001/a"}],"else":[{"op":"put","key":"item/1","value":"x"}]}`, 0, partition.SetOf(0, 1, 2)},
		{"replicated add goes everywhere", `{"then":[{"op":"add","key":"item/1","int":1}]}`, 1, partition.SetOf(0, 1, 2)},
		{"replicated delete goes everywhere", `{"then":[{"op":"delete","key":"item/1"}]}`, 1, partition.SetOf(0, 1, 2)},
		{"home ignored when not needed", `{"then":[{"op":"get","key":"w/0004/a"}]}`, partition.NoGroup, partition.SetOf(2)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mustParse(t, tt.json).Destinations(pm, top, tt.home)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}

	itemOnly := mustParse(t, `{"then":[{"op":"get","key":"item/1"}]}`)
	for _, home := range []partition.GroupID{partition.NoGroup, 3} {
		if _, err := itemOnly.Destinations(pm, top, home); err == nil || !strings.Contains(err.Error(), "home group") {
			t.Errorf("home %d: error %v, want one about the home group", home, err)
		}
	}
	bad := mustParse(t, `{"then":[{"op":"get","key":"x/1"}]}`)
	if _, err := bad.Destinations(pm, top, 0); err == nil {
		t.Error("key in no partition routed")
	}
	if _, err := itemOnly.Destinations(pm, nil, 0); err == nil {
		t.Error("routed without a topology")
	}
}

// describePiece formats a piece: compares as L (local, owned), L* (local,
// replicated) or R<owner>; then op positions.
func describePiece(p Piece) string {
	var ifs []string
	for _, c := range p.If {
		switch {
		case c.Local && c.Owner == partition.NoGroup:
			ifs = append(ifs, "L*")
		case c.Local:
			ifs = append(ifs, "L")
		default:
			ifs = append(ifs, fmt.Sprintf("R%d", c.Owner))
		}
	}
	return fmt.Sprintf("g%d if[%s] then%v else%v voters%s voteto%s",
		p.Group, strings.Join(ifs, " "), p.Then, p.Else, p.Voters, p.VoteTo)
}

// mixedTxn touches every case of the plan: a compare owned by group 0, one
// on a replicated key, one owned by group 2; a replicated read, adds in
// groups 0 and 1, a replicated write; an else branch in group 1.
const mixedTxn = `{"if":[{"key":"w/0001/a","cmp":">=","int":5},{"key":"item/1","cmp":"=","value":"x"},{"key":"w/0004/b","cmp":"=","int":1}],` +
	`"then":[{"op":"get","key":"item/2"},{"op":"add","key":"w/0001/a","int":-5},{"op":"add","key":"w/0003/a","int":5},{"op":"put","key":"item/3","value":"y"}],` +
	`"else":[{"op":"get","key":"w/0003/a"}]}`

func TestPieces(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	tests := []struct {
		name string
		json string
		dst  partition.GroupSet
		want []string
	}{
		{"single group", designTransfer, partition.SetOf(0), []string{
			"g0 if[L] then[0 1] else[] voters{} voteto{}",
		}},
		{"mixed", mixedTxn, partition.SetOf(0, 1, 2), []string{
			"g0 if[L L* R2] then[0 1 3] else[] voters{1,2} voteto{1,2}",
			"g1 if[R0 L* R2] then[2 3] else[0] voters{0,2} voteto{0,2}",
			"g2 if[R0 L* L] then[3] else[] voters{0,1} voteto{0,1}",
		}},
		{"replicated reads at home", `{"if":[{"key":"item/1","cmp":"!=","value":""}],"then":[{"op":"get","key":"item/1"}],"else":[{"op":"get","key":"item/2"}]}`,
			partition.SetOf(2), []string{
				"g2 if[L*] then[0] else[0] voters{} voteto{}",
			}},
		{"replicated read by the lca", `{"then":[{"op":"get","key":"item/1"},{"op":"get","key":"w/0004/a"},{"op":"get","key":"w/0003/a"}]}`,
			partition.SetOf(1, 2), []string{
				"g1 if[] then[0 2] else[] voters{} voteto{}",
				"g2 if[] then[1] else[] voters{} voteto{}",
			}},
		{"an add on an owned key votes", `{"then":[{"op":"add","key":"w/0001/a","int":1},{"op":"put","key":"w/0003/a","value":"x"}]}`,
			partition.SetOf(0, 1), []string{
				"g0 if[] then[0] else[] voters{} voteto{1}",
				"g1 if[] then[1] else[] voters{0} voteto{}",
			}},
		{"a transfer that does not wrap: both vote", `{"if":[{"key":"w/0001/a","cmp":">=","int":5}],"then":[{"op":"add","key":"w/0001/a","int":-5},{"op":"add","key":"w/0003/a","int":5}]}`,
			partition.SetOf(0, 1), []string{
				"g0 if[L] then[0] else[] voters{1} voteto{1}",
				"g1 if[R0] then[1] else[] voters{0} voteto{0}",
			}},
		{"a transfer whose adds wrap: only the compare's owner votes, and waits for none", `{"if":[{"key":"w/0001/a","cmp":">=","int":5}],"then":[{"op":"add","key":"w/0001/a","int":-5,"wrap":true},{"op":"add","key":"w/0003/a","int":5,"wrap":true}]}`,
			partition.SetOf(0, 1), []string{
				"g0 if[L] then[0] else[] voters{} voteto{1}",
				"g1 if[R0] then[1] else[] voters{0} voteto{}",
			}},
		{"an add that wraps needs no vote", `{"then":[{"op":"add","key":"w/0001/a","int":1,"wrap":true},{"op":"put","key":"w/0003/a","value":"x"}]}`,
			partition.SetOf(0, 1), []string{
				"g0 if[] then[0] else[] voters{} voteto{}",
				"g1 if[] then[1] else[] voters{} voteto{}",
			}},
		{"an add in else votes too", `{"if":[{"key":"item/1","cmp":"=","value":"x"}],"then":[{"op":"put","key":"w/0001/a","value":"1"}],"else":[{"op":"add","key":"w/0003/a","int":1}]}`,
			partition.SetOf(0, 1), []string{
				"g0 if[L*] then[0] else[] voters{1} voteto{}",
				"g1 if[L*] then[] else[0] voters{} voteto{0}",
			}},
		{"an add on a replicated key needs no vote", `{"then":[{"op":"add","key":"item/1","int":1},{"op":"put","key":"w/0001/a","value":"x"}]}`,
			partition.SetOf(0, 1, 2), []string{
				"g0 if[] then[0 1] else[] voters{} voteto{}",
				"g1 if[] then[0] else[] voters{} voteto{}",
				"g2 if[] then[0] else[] voters{} voteto{}",
			}},
		{"no compare and no add: no vote", `{"then":[{"op":"put","key":"w/0001/a","value":"x"},{"op":"get","key":"w/0004/a"},{"op":"delete","key":"w/0003/a"}]}`,
			partition.SetOf(0, 1, 2), []string{
				"g0 if[] then[0] else[] voters{} voteto{}",
				"g1 if[] then[2] else[] voters{} voteto{}",
				"g2 if[] then[1] else[] voters{} voteto{}",
			}},
		{"compare-only group", `{"if":[{"key":"w/0003/a","cmp":"<","int":0}],"then":[{"op":"put","key":"w/0004/a","value":"neg"}]}`,
			partition.SetOf(1, 2), []string{
				"g1 if[L] then[] else[] voters{} voteto{2}",
				"g2 if[R1] then[0] else[] voters{1} voteto{}",
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := mustParse(t, tt.json)
			// The destination set Destinations gives is the one Pieces
			// accepts (home 2 for a replicated-only transaction).
			dst, err := tx.Destinations(pm, top, 2)
			if err != nil {
				t.Fatal(err)
			}
			if dst != tt.dst {
				t.Fatalf("Destinations: %s, want %s", dst, tt.dst)
			}
			pieces, err := tx.Pieces(pm, top, dst)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range pieces {
				if p.Txn != tx {
					t.Errorf("piece of group %d does not share the transaction", p.Group)
				}
				got = append(got, describePiece(p))
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("got\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestPiecesRejectsWrongDestinations(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	tests := []struct {
		name string
		json string
		dst  partition.GroupSet
		want string
	}{
		{"missing a group", mixedTxn, partition.SetOf(0, 1), "txn: destination set {0,1}, want {0,1,2}"},
		{"extra group", designTransfer, partition.SetOf(0, 1), "txn: destination set {0,1}, want {0}"},
		{"empty", designTransfer, 0, "txn: destination set {}, want {0}"},
		{"replicated reads at two groups", `{"then":[{"op":"get","key":"item/1"}]}`, partition.SetOf(0, 1), "has one destination"},
		{"replicated reads at an unknown group", `{"then":[{"op":"get","key":"item/1"}]}`, partition.SetOf(5), "has one destination"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := mustParse(t, tt.json).Pieces(pm, top, tt.dst)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
		})
	}
}
