package procs

import (
	"hash/fnv"
	"math/rand/v2"
	"strings"
)

// Deterministic text and TPC-C's random functions (clause 4.3.2), shared
// by the loader, the procedures and the workload.

// keyRand returns a generator seeded by name: the same name, the same
// draws, on every machine.
func keyRand(name string) *rand.Rand {
	h := fnv.New64a()
	_, _ = h.Write([]byte(name))
	s := h.Sum64()
	return rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))
}

const alnum = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

// astring returns a random alphanumeric string of min..max characters
// (TPC-C's a-string).
func astring(r *rand.Rand, lo, hi int) string {
	n := lo + r.IntN(hi-lo+1)
	b := make([]byte, n)
	for i := range b {
		b[i] = alnum[r.IntN(len(alnum))]
	}
	return string(b)
}

// nstring returns a random numeric string of n digits (TPC-C's n-string).
func nstring(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.IntN(10))
	}
	return string(b)
}

// text returns a deterministic a-string of min..max characters for the
// column named name (a key and a column, say).
func text(name string, lo, hi int) string { return astring(keyRand(name), lo, hi) }

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
func NURand(r *rand.Rand, a, x, y, c int) int {
	return ((r.IntN(a+1)|(x+r.IntN(y-x+1)))+c)%(y-x+1) + x
}
