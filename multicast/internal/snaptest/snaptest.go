// Package snaptest holds the restore properties that every protocol core's
// snapshot must have, written once for the three cores: a snapshot just
// taken restores to a core with the same encoding and counters; every
// truncation of a snapshot is refused; a corrupted snapshot is refused or
// restores to a core whose encoding is stable; a snapshot taken with output
// not drained panics.
//
// It imports no core, so that a core's own (internal) tests can use it with
// hooks into the core's unexported checks; the cores themselves may not
// import it (internal/lint: a harness package).
package snaptest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/internal/wire"
)

// Snapshotter is a core that encodes its state.
type Snapshotter interface {
	AppendSnapshot(b []byte) []byte
}

// Codec restores the snapshots of one group's core under one
// configuration, and says what else to check of a restored core.
type Codec[C Snapshotter] struct {
	// Prefix starts every error of Restore ("tree: restore").
	Prefix  string
	Restore func(b []byte) (C, error)
	// Stats returns the counters a restored copy must keep; nil: none.
	Stats func(c C) any
	// Check checks a restored core further without changing it (internal
	// invariants); nil: nothing.
	Check func(c C) error
	// Exercise steps a core that Restore accepted from arbitrary bytes, to
	// show it works (takes ticks without failing); nil: nothing.
	Exercise func(c C) error
}

// Copy snapshots c (behind other bytes, as a shell appends it), restores
// the snapshot and checks the copy: same encoding, same Stats, Check. It
// then overwrites the snapshot, so that a copy that kept references into it
// goes wrong later. It returns the copy and a clone of the snapshot.
func Copy[C Snapshotter](t testing.TB, k Codec[C], c C) (C, []byte) {
	t.Helper()
	snap := c.AppendSnapshot([]byte("prefix"))[len("prefix"):]
	kept := bytes.Clone(snap)
	r, err := k.Restore(snap)
	if err != nil {
		t.Fatalf("Restore of a snapshot just taken: %v", err)
	}
	if k.Check != nil {
		if err := k.Check(r); err != nil {
			t.Fatalf("restored core: %v", err)
		}
	}
	if again := r.AppendSnapshot(nil); !bytes.Equal(again, snap) {
		t.Fatalf("snapshot of the restored core differs:\n got %x\nwant %x", again, snap)
	}
	if k.Stats != nil {
		if diff := cmp.Diff(k.Stats(c), k.Stats(r)); diff != "" {
			t.Fatalf("Stats of the restored core (-original +restored):\n%s", diff)
		}
	}
	for i := range snap {
		snap[i] = 0xa5
	}
	return r, kept
}

// Property restores b: it must be refused with an error that starts with
// k.Prefix and wraps wire.ErrCorrupt, or restore to a core that passes
// k.Check and k.Exercise and whose snapshot restores to the same snapshot
// again (b may hold varints padded with zero groups, which re-encode
// shorter). It reports whether b was accepted.
func Property[C Snapshotter](t testing.TB, k Codec[C], b []byte) bool {
	t.Helper()
	c, err := k.Restore(b)
	if err != nil {
		if !errors.Is(err, wire.ErrCorrupt) || !strings.HasPrefix(err.Error(), k.Prefix) {
			t.Fatalf("Restore error %q: want a %s error wrapping ErrCorrupt", err, k.Prefix)
		}
		return false
	}
	again := c.AppendSnapshot(nil)
	c2, err := k.Restore(again)
	if err != nil {
		t.Fatalf("re-encoded snapshot refused: %v", err)
	}
	if !bytes.Equal(c2.AppendSnapshot(nil), again) {
		t.Fatalf("snapshot encoding is not stable")
	}
	if k.Check != nil {
		if err := k.Check(c); err != nil {
			t.Fatalf("Restore accepted a broken state: %v", err)
		}
	}
	if k.Exercise != nil {
		if err := k.Exercise(c); err != nil {
			t.Fatalf("a restored core: %v", err)
		}
	}
	return true
}

// Truncations checks that every proper prefix of snap is refused with
// wire.ErrCorrupt; name says which snapshot it is.
func Truncations[C Snapshotter](t testing.TB, k Codec[C], name string, snap []byte) {
	t.Helper()
	for n := range len(snap) {
		if _, err := k.Restore(snap[:n]); !errors.Is(err, wire.ErrCorrupt) {
			t.Fatalf("%s: Restore of %d of %d bytes: got %v, want ErrCorrupt", name, n, len(snap), err)
		}
	}
}

// A Case is a snapshot and the codec that restores it.
type Case[C Snapshotter] struct {
	Codec Codec[C]
	Snap  []byte
}

// Corruptions flips, drops and inserts random bytes of each case's
// snapshot, n times per case: Restore must refuse each with ErrCorrupt or
// return a core that encodes back to a snapshot it accepts (Property). At
// least one corruption must be refused.
func Corruptions[C Snapshotter](t testing.TB, seed uint64, n int, cases ...Case[C]) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	accepted, rejected := 0, 0
	for _, c := range cases {
		for range n {
			b := bytes.Clone(c.Snap)
			for range 1 + rng.IntN(3) {
				i := rng.IntN(len(b))
				switch rng.IntN(3) {
				case 0:
					b[i] ^= 1 << rng.IntN(8)
				case 1:
					b = append(b[:i], b[i+1:]...)
				default:
					b = append(b[:i], append([]byte{byte(rng.Uint32())}, b[i:]...)...)
				}
			}
			if Property(t, c.Codec, b) {
				accepted++
			} else {
				rejected++
			}
		}
	}
	if rejected == 0 {
		t.Errorf("no corruption was rejected")
	}
	t.Logf("%d corruptions rejected, %d accepted", rejected, accepted)
}

// UndrainedPanics checks that c, which holds output not drained (what
// says which), panics in AppendSnapshot: such a snapshot would lose it.
func UndrainedPanics(t testing.TB, c Snapshotter, what string) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Errorf("AppendSnapshot with %s not drained did not panic", what)
		}
	}()
	c.AppendSnapshot(nil)
}
