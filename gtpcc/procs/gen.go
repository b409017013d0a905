package procs

import (
	"hash/fnv"
	"math/bits"
	"strings"
)

// Deterministic text and TPC-C's random functions (clause 4.3.2), shared
// by the loader, the procedures and the workload.

// Rand draws uniform integers in [0, n): keyRand in the loader, the
// workload's seeded *math/rand/v2.Rand on the client side.
type Rand interface {
	IntN(n int) int
}

// keyRand is a generator seeded by a name (a row's key and column): the
// same name, the same draws, on every replica and machine. It is PCG-DXSM
// with a 128-bit state and Lemire's unbiased reduction for IntN, the
// algorithms of math/rand/v2's PCG and Rand.IntN, which a replica-side
// package may not import (internal/lint: randomness belongs to the
// driver; here the seed is the key, so nothing is random). Its draws are
// exactly those of rand.New(rand.NewPCG(s, s^keyRandSeedXor)) for the
// name's FNV-1a hash s (TestKeyRandMatchesMathRand).
type keyRand struct {
	hi, lo uint64
}

// keyRandSeedXor derives the second half of a keyRand's seed from the
// first.
const keyRandSeedXor = 0x9e3779b97f4a7c15

// newKeyRand returns the generator of name.
func newKeyRand(name string) *keyRand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	s := h.Sum64()
	return &keyRand{hi: s, lo: s ^ keyRandSeedXor}
}

// uint64 returns the next 64 bits: one step of the 128-bit LCG, then the
// DXSM output function (pcg-cpp's pcg_random.hpp, as math/rand/v2's
// PCG.Uint64).
func (r *keyRand) uint64() uint64 {
	const (
		mulHi    = 2549297995355413924
		mulLo    = 4865540595714422341
		incHi    = 6364136223846793005
		incLo    = 1442695040888963407
		cheapMul = 0xda942042e4dd58b5
	)
	// state = state * mul + inc, modulo 2^128
	hi, lo := bits.Mul64(r.lo, mulLo)
	hi += r.hi*mulLo + r.lo*mulHi
	lo, c := bits.Add64(lo, incLo, 0)
	hi, _ = bits.Add64(hi, incHi, c)
	r.hi, r.lo = hi, lo

	hi ^= hi >> 32
	hi *= cheapMul
	hi ^= hi >> 48
	hi *= lo | 1
	return hi
}

// IntN returns a uniform integer in [0, n), n > 0: the high word of a
// 64x64-bit product, drawn again while it falls in the biased low part
// (Lemire, "Fast random integer generation in an interval", 2019), as
// math/rand/v2's Rand.IntN.
func (r *keyRand) IntN(n int) int {
	if n <= 0 {
		// The callers pass constants and validated scales.
		panic("procs: keyRand.IntN: n must be positive")
	}
	un := uint64(n)
	if un&(un-1) == 0 { // a power of two: mask
		return int(r.uint64() & (un - 1))
	}
	hi, lo := bits.Mul64(r.uint64(), un)
	if lo < un {
		thresh := -un % un
		for lo < thresh {
			hi, lo = bits.Mul64(r.uint64(), un)
		}
	}
	return int(hi)
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// astring returns a random alphanumeric string of min..max characters
// (TPC-C's a-string).
func astring(r *keyRand, lo, hi int) string {
	n := lo + r.IntN(hi-lo+1)
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

// nstring returns a random numeric string of n digits (TPC-C's n-string).
func nstring(r *keyRand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.IntN(10))
	}
	return string(b)
}

// text returns a deterministic a-string of min..max characters for the
// column named name (a key and a column, say).
func text(name string, lo, hi int) string { return astring(newKeyRand(name), lo, hi) }

// StockDist returns S_DIST_dd of the stock row of item i in warehouse w
// for district d: 24 characters, fixed by (w, i, d), so that a new-order
// line's district information is known without reading the stock row.
func StockDist(w, i, d int) string {
	return text(string(StockKey(w, i))+"/dist/"+itoa2(d), 24, 24)
}

func itoa2(d int) string { return string([]byte{byte('0' + d/10%10), byte('0' + d%10)}) }

// syllables make customer last names (clause 4.3.2.3).
var syllables = [...]string{"BAR", "OUGHT", "ABLE", "PRI", "PRES", "ESE", "ANTI", "CALLY", "ATION", "EING"}

// LastName returns the customer last name of number n (0..999): three
// syllables, by n's digits.
func LastName(n int) string {
	var b strings.Builder
	b.WriteString(syllables[n/100%10])
	b.WriteString(syllables[n/10%10])
	b.WriteString(syllables[n%10])
	return b.String()
}

// NURand is TPC-C's non-uniform random number in [x, y] (clause 2.1.6)
// with constant c.
func NURand(r Rand, a, x, y, c int) int {
	return ((r.IntN(a+1)|(x+r.IntN(y-x+1)))+c)%(y-x+1) + x
}
