// Package checker checks a history of DESIGN 10.4 for the claim of DESIGN
// 12: strict serializability.
//
// List-append transactions are checked in the manner of Elle (Kingsbury and
// Alvaro, "Elle: Inferring Isolation Anomalies from Experimental
// Observations", VLDB 2020). Every value appended to a key is unique, so a
// read of a list names, for each of its elements, the one transaction that
// appended it, and the lists read of one key must all be prefixes of one
// order: the key's version order. From it come the dependencies between
// transactions: write-write (ww: T1 appended the element just before T2's),
// write-read (wr: T2 read a list whose last element T1 appended) and
// read-write (rw, an anti-dependency: T1 read a list that T2's append
// extends next), plus real-time order (T1 completed before T2 was
// invoked). A cycle of these is an anomaly, classified as Adya's by the
// edges it needs: ww alone G0, ww and wr G1c, one rw G-single, more G2;
// a cycle that needs a real-time edge violates strict serializability only
// and is marked -realtime. Reads are also checked one by one: an element
// appended by a transaction that failed (G1a), a read ending inside a
// transaction's appends (G1b), an element nobody appended, an element read
// twice, two reads that are not prefixes of one order, a transaction that
// does not see its own appends, and an acknowledged append that a read
// invoked after it completed does not hold (lost).
//
// Registers (single keys written and read) are checked for linearizability
// with porcupine, one key at a time.
package checker

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/flexkv/flexkv/jepsen/history"
)

// The kinds of anomaly.
const (
	G0              = "G0"
	G1a             = "G1a"
	G1b             = "G1b"
	G1c             = "G1c"
	GSingle         = "G-single"
	G2              = "G2"
	RealtimeSuffix  = "-realtime"
	DuplicateRead   = "duplicate-elements"
	DuplicateAppend = "duplicate-append"
	GarbageRead     = "garbage-read"
	Incompatible    = "incompatible-order"
	LostAppend      = "lost-append"
	Internal        = "internal"
	NonLinearizable = "register-nonlinearizable"
	RegisterUnknown = "register-unchecked" // not an anomaly: Result.Unchecked
)

// Options bound the checker's work.
type Options struct {
	// CyclesMax is the number of cycles of each kind printed (0: 4); every
	// one is counted.
	CyclesMax int
	// RegisterTimeout bounds porcupine's search per key (0: one minute);
	// a key it cannot decide in time is reported as register-unchecked.
	RegisterTimeout time.Duration
	// ExamplesMax bounds the examples printed of each other kind (0: 8).
	ExamplesMax int
}

// Anomaly is one anomaly found, with its text: what it is, the cycle with
// each edge's reason, and the operations involved as history lines.
type Anomaly struct {
	Kind string
	Text string
}

// Result is the verdict on a history.
type Result struct {
	Ops              int // client operations
	OK, Fail, Info   int // their outcomes (an operation never completed is info)
	Txns, Registers  int // client operations by f
	Nemesis          int // nemesis lines
	Counts           map[string]int
	Anomalies        []Anomaly // at most CyclesMax or ExamplesMax of each kind
	KeysChecked      int       // list keys with a version order
	RegisterKeys     int
	Unchecked        int // register keys porcupine did not decide in time
	GraphTxns, Edges int
}

// Valid reports whether the history shows no anomaly at all: it is
// strictly serializable, its registers linearizable.
func (r *Result) Valid() bool { return len(r.Counts) == 0 }

// Model is a consistency model a history is judged by.
type Model string

// The models: serializable (a cycle without real-time edges, or a read
// that no serial order explains) and strict-serializable (also real time:
// every anomaly). Registers are judged linearizable under both.
const (
	Serializable       Model = "serializable"
	StrictSerializable Model = "strict-serializable"
)

// ParseModel returns the model named s.
func ParseModel(s string) (Model, error) {
	switch m := Model(s); m {
	case Serializable, StrictSerializable:
		return m, nil
	}
	return "", fmt.Errorf("checker: model %q: want serializable or strict-serializable", s)
}

// RealTime reports whether anomalies of kind break real-time order only:
// they are anomalies of strict serializability, not of serializability.
func RealTime(kind string) bool {
	return kind == LostAppend || strings.HasSuffix(kind, RealtimeSuffix)
}

// Violations returns the number of anomalies that model forbids.
func (r *Result) Violations(model Model) int {
	n := 0
	for k, c := range r.Counts { //flexkv:unordered a sum
		if model == StrictSerializable || !RealTime(k) {
			n += c
		}
	}
	return n
}

// Summary is one line: the counts and every anomaly kind with its number.
func (r *Result) Summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "operations %d (ok %d, fail %d, info %d; txn %d, register %d), nemesis lines %d, ",
		r.Ops, r.OK, r.Fail, r.Info, r.Txns, r.Registers, r.Nemesis)
	if r.Unchecked > 0 {
		fmt.Fprintf(&b, "register keys undecided %d, ", r.Unchecked)
	}
	if r.Valid() {
		b.WriteString("anomalies 0: valid")
		return b.String()
	}
	kinds := make([]string, 0, len(r.Counts))
	total := 0
	for k, n := range r.Counts { //flexkv:unordered sorted below
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	slices.Sort(kinds)
	fmt.Fprintf(&b, "anomalies %d: %s", total, strings.Join(kinds, ", "))
	return b.String()
}

// Check checks h.
func Check(h *history.History, opt Options) *Result {
	if opt.CyclesMax <= 0 {
		opt.CyclesMax = 4
	}
	if opt.ExamplesMax <= 0 {
		opt.ExamplesMax = 8
	}
	if opt.RegisterTimeout <= 0 {
		opt.RegisterTimeout = time.Minute
	}
	r := &Result{Counts: map[string]int{}}
	for _, op := range h.Ops {
		if op.Process == history.NemesisProcess {
			r.Nemesis++
		}
	}
	for _, p := range h.Pairs {
		r.Ops++
		switch h.Outcome(p) {
		case history.OK:
			r.OK++
		case history.Fail:
			r.Fail++
		default:
			r.Info++
		}
		if h.Ops[p.Invoke].F == history.FTxn {
			r.Txns++
		} else {
			r.Registers++
		}
	}
	c := &listChecker{h: h, opt: opt, res: r}
	c.run()
	checkRegisters(h, opt, r)
	return r
}

// report records an anomaly of kind, printing at most limit of each kind.
func (r *Result) report(kind string, limit int, text func() string) {
	r.Counts[kind]++
	if r.Counts[kind] <= limit {
		r.Anomalies = append(r.Anomalies, Anomaly{Kind: kind, Text: text()})
	}
}

// opLine is an operation as its history line.
func opLine(op history.Op) string {
	b, err := op.MarshalJSON()
	if err != nil {
		return fmt.Sprintf("(line %d: %v)", op.Index+1, err)
	}
	return string(b)
}
