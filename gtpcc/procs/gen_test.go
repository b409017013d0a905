package procs

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKeyRandMatchesMathRand: keyRand draws what math/rand/v2's PCG and
// Rand.IntN draw from the same seed, for bounds small and large, powers of
// two among them, and bounds whose reduction rejects often.
func TestKeyRandMatchesMathRand(t *testing.T) {
	bounds := []int{1, 2, 3, 7, 10, 16, 91, 1000, 2001, 5001, 9901, 10000, 1 << 20, 1<<32 + 1, 3 << 61, math.MaxInt}
	for _, name := range []string{"", "w/0001/wh", "w/0042/s/000123", "w/0007/d/03/o_c_id", "item/100000"} {
		h := fnv.New64a()
		_, _ = h.Write([]byte(name))
		s := h.Sum64()
		want := rand.New(rand.NewPCG(s, s^keyRandSeedXor))
		got := newKeyRand(name)
		for i := range 2000 {
			n := bounds[i%len(bounds)]
			if g, w := got.IntN(n), want.IntN(n); g != w {
				t.Fatalf("name %q, draw %d: IntN(%d) = %d, want %d (math/rand/v2)", name, i, n, g, w)
			}
		}
	}
}

// TestKeyRandSameName: one name, one sequence; another name, another.
func TestKeyRandSameName(t *testing.T) {
	a, b, c := newKeyRand("w/0001/wh"), newKeyRand("w/0001/wh"), newKeyRand("w/0002/wh")
	differ := false
	for range 100 {
		x, y, z := a.IntN(1000), b.IntN(1000), c.IntN(1000)
		if x != y {
			t.Fatalf("the same name drew %d and %d", x, y)
		}
		differ = differ || x != z
	}
	if !differ {
		t.Error("two names drew the same 100 numbers")
	}
}

func TestKeyRandIntNPanicsOnNonPositive(t *testing.T) {
	for _, n := range []int{0, -1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("IntN(%d) did not panic", n)
				}
			}()
			newKeyRand("x").IntN(n)
		}()
	}
}
