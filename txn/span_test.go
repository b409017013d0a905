package txn

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/partition"
)

// A scan whose range spans partitions of several groups: every owner is a
// destination, each reads its own parts (the lca also the replicated ones),
// and the merge gives the first Limit keys of the whole range in key order.
func TestScanAcrossGroups(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	// item/ (replicated), w0001, w0002 (group 0), w0003 (group 1), w0004
	// (group 2); the range starts in the item table and ends inside w0004.
	stores := [3]map[string]string{
		{"item/1": "i1", "item/2": "i2", "w/0001/a": "1a", "w/0001/b": "1b", "w/0002/a": "2a"},
		{"item/1": "i1", "item/2": "i2", "w/0003/a": "3a", "w/0003/b": "3b"},
		{"item/1": "i1", "item/2": "i2", "w/0004/a": "4a", "w/0004/z": "4z"},
	}
	tests := []struct {
		name    string
		scan    string
		dst     partition.GroupSet
		spans   [3]string // each group's spans of the scan, "" when it runs none
		results [3]string // each piece's report
		merged  string
	}{
		{
			name:    "every key",
			scan:    `{"op":"scan","key":"item/2","end":"w/0004/b","limit":100}`,
			dst:     partition.SetOf(0, 1, 2),
			spans:   [3]string{"[item/2,item0) [w/0001/,w/0002/) [w/0002/,w/0003/)", "[w/0003/,w/0004/)", "[w/0004/,w/0004/b)"},
			results: [3]string{"0:scan [item/2=i2 w/0001/a=1a w/0001/b=1b w/0002/a=2a]", "0:scan [w/0003/a=3a w/0003/b=3b]", "0:scan [w/0004/a=4a]"},
			merged:  "0:scan [item/2=i2 w/0001/a=1a w/0001/b=1b w/0002/a=2a w/0003/a=3a w/0003/b=3b w/0004/a=4a]",
		},
		{
			name:    "the limit cuts each piece and the merge",
			scan:    `{"op":"scan","key":"w/0001/b","end":"w/0005/","limit":3}`,
			dst:     partition.SetOf(0, 1, 2),
			spans:   [3]string{"[w/0001/b,w/0002/) [w/0002/,w/0003/)", "[w/0003/,w/0004/)", "[w/0004/,w/0005/)"},
			results: [3]string{"0:scan [w/0001/b=1b w/0002/a=2a]", "0:scan [w/0003/a=3a w/0003/b=3b]", "0:scan [w/0004/a=4a w/0004/z=4z]"},
			merged:  "0:scan [w/0001/b=1b w/0002/a=2a w/0003/a=3a]",
		},
		{
			name:    "two groups, the first group's parts fill the limit",
			scan:    `{"op":"scan","key":"w/0001/","end":"w/0004/","limit":2}`,
			dst:     partition.SetOf(0, 1),
			spans:   [3]string{"[w/0001/,w/0002/) [w/0002/,w/0003/)", "[w/0003/,w/0004/)", ""},
			results: [3]string{"0:scan [w/0001/a=1a w/0001/b=1b]", "0:scan [w/0003/a=3a w/0003/b=3b]", ""},
			merged:  "0:scan [w/0001/a=1a w/0001/b=1b]",
		},
		{
			name:    "two partitions of one group: one destination",
			scan:    `{"op":"scan","key":"w/0001/b","end":"w/0002/b","limit":10}`,
			dst:     partition.SetOf(0),
			spans:   [3]string{"[w/0001/b,w/0002/) [w/0002/,w/0002/b)", "", ""},
			results: [3]string{"0:scan [w/0001/b=1b w/0002/a=2a]", "", ""},
			merged:  "0:scan [w/0001/b=1b w/0002/a=2a]",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tx := mustParse(t, `{"then":[`+tt.scan+`]}`)
			dst, err := tx.Destinations(pm, top, 2)
			if err != nil {
				t.Fatal(err)
			}
			if dst != tt.dst {
				t.Fatalf("destinations %s, want %s", dst, tt.dst)
			}
			pieces, err := tx.Pieces(pm, top, dst)
			if err != nil {
				t.Fatal(err)
			}
			reports := evalSpanPieces(t, pieces, stores, tt.spans, tt.results)
			for g := range tt.results {
				if !dst.Has(partition.GroupID(g)) && tt.results[g] != "" {
					t.Errorf("group %d is no destination, but the case expects %q", g, tt.results[g])
				}
			}
			res, err := tx.MergeResults("c1.1", reports)
			if err != nil {
				t.Fatal(err)
			}
			if got := describeResults(res.Results); got != tt.merged {
				t.Errorf("merged\n got %s\nwant %s", got, tt.merged)
			}
		})
	}
}

// A scan inside one partition keeps its whole range (no spans), as before.
func TestScanInOnePartitionHasNoSpans(t *testing.T) {
	top := testTopology(t)
	pm := testPartitionMap(t, top)
	for _, scan := range []string{
		`{"op":"scan","key":"w/0003/a","end":"w/0003/z","limit":3}`,
		`{"op":"scan","key":"w/0003/a","end":"w/0004/","limit":3}`, // ends where the partition ends
	} {
		tx := mustParse(t, `{"then":[`+scan+`,{"op":"get","key":"w/0003/b"}]}`)
		p, err := tx.PieceOf(pm, top, partition.SetOf(1), 1)
		if err != nil {
			t.Fatal(err)
		}
		if p.ThenSpans != nil || p.ElseSpans != nil {
			t.Errorf("%s: spans %v %v, want none", scan, p.ThenSpans, p.ElseSpans)
		}
	}
}

// The merge refuses reports that cannot be parts of one scan.
func TestMergeScansRejects(t *testing.T) {
	scan := func(keys ...string) OpResult {
		r := OpResult{Index: 0, Kind: OpScan, Key: []byte("w/0001/")}
		for _, k := range keys {
			r.KVs = append(r.KVs, KV{Key: []byte(k), Value: []byte("v")})
		}
		return r
	}
	twice := []PieceResult{{Succeeded: true, Results: []OpResult{scan("a", "b")}}, {Succeeded: true, Results: []OpResult{scan("b", "c")}}}
	if _, err := MergeResults("c1.1", twice); err == nil || !strings.Contains(err.Error(), `two destinations report key "b" of scan 0`) {
		t.Errorf("a key reported twice: %v", err)
	}
	kinds := []PieceResult{{Succeeded: true, Results: []OpResult{scan("a")}}, {Succeeded: true, Results: []OpResult{{Index: 0, Kind: OpGet, Key: []byte("w/0001/")}}}}
	if _, err := MergeResults("c1.1", kinds); err == nil || !strings.Contains(err.Error(), "report index 0 as scan and get") {
		t.Errorf("a scan and a get at one index: %v", err)
	}
	// A part left out (too large to keep) is said, never hidden.
	trunc := []PieceResult{{Succeeded: true, Results: []OpResult{scan("a")}}, {Succeeded: true, Truncated: true}}
	if _, err := MergeResults("c1.1", trunc); !errors.Is(err, ErrTruncated) {
		t.Errorf("a truncated part: %v, want ErrTruncated", err)
	}
}

// evalSpanPieces checks each piece's spans of its scan against spans and
// evaluates it on its group's store against results; it returns the
// pieces' reports.
func evalSpanPieces(t *testing.T, pieces []Piece, stores [3]map[string]string, wantSpans, wantResults [3]string) []PieceResult {
	t.Helper()
	var reports []PieceResult
	for _, p := range pieces {
		g := p.Group
		var spans []string
		if len(p.ThenSpans) > 0 {
			for _, sp := range p.ThenSpans[0] {
				spans = append(spans, fmt.Sprintf("[%s,%s)", sp.Start, sp.End))
			}
		}
		if got := strings.Join(spans, " "); got != wantSpans[g] {
			t.Errorf("group %d: spans %q, want %q", g, got, wantSpans[g])
		}
		if p.Voters != 0 || p.VoteTo != 0 {
			t.Errorf("group %d: a read-only scan votes: voters %s, vote to %s", g, p.Voters, p.VoteTo)
		}
		ok, results, err := Eval(NewMemStore(stores[g]), NewMemStore(nil), &p)
		if err != nil || !ok {
			t.Fatalf("group %d: Eval = %v, %v", g, ok, err)
		}
		if got := describeResults(results); got != wantResults[g] {
			t.Errorf("group %d: results\n got %s\nwant %s", g, got, wantResults[g])
		}
		reports = append(reports, PieceResult{Succeeded: true, Results: results})
	}
	return reports
}
