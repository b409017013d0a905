//go:build invariants

package kv

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/invariants"
)

// Under the invariants tag a commit checks the batch it commits and the
// state it leaves: a state broken in memory, or a batch broken before its
// commit, panics, naming the invariant.
func TestInvariantsFire(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		breakIt    func(s *Store, b *Batch)
		noResult   bool // the batch sets no result, so the sequences are not written
	}{
		{"result sequences out of step with the store", "result sequences", func(s *Store, _ *Batch) { s.resFirst++ }, true},
		{"an id indexed without a result", "result ids indexed", func(s *Store, _ *Batch) { s.h.ids["ghost"] = struct{}{} }, false},
		{"a result set twice", "twice", func(_ *Store, b *Batch) { b.results = append(b.results, b.results[0]) }, false},
		{"results without data", "holds no data", func(_ *Store, b *Batch) { b.data = false }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := openStore(t, Options{NoSync: true, ResultsMax: 3})
			commit(t, s, 1, ops(put("k", "v"), result("t1", "r1"))) // a correct state passes
			b := s.NewBatch()
			defer b.Close()
			if tt.noResult {
				if err := b.Put(keyOf("k"), []byte("w")); err != nil {
					t.Fatal(err)
				}
			} else if err := b.SetResult("t2", []byte("r2")); err != nil {
				t.Fatal(err)
			}
			tt.breakIt(s, b)
			v := invariants.Catch(func() { _ = s.Commit(b, 2) })
			switch {
			case v == nil:
				t.Fatalf("no invariant fired, want one about %q", tt.want)
			case !strings.Contains(v.Detail, tt.want):
				t.Fatalf("%v fired, want one about %q", v, tt.want)
			}
		})
	}
}
