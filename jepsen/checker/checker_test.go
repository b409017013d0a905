package checker

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/jepsen/history"
)

// builder writes a history line by line through history.Writer, then reads
// it back with history.Read, so that every test goes through the format.
type builder struct {
	t    *testing.T
	buf  bytes.Buffer
	w    *history.Writer
	now  int64
	open map[int]history.Op
}

func newBuilder(t *testing.T) *builder {
	b := &builder{t: t, open: map[int]history.Op{}}
	b.w = history.NewWriter(&b.buf, func() int64 { b.now += 10; return b.now })
	return b
}

func a(k string, v int64) history.Mop { return history.Append(k, v) }

func r(k string, list ...int64) history.Mop {
	if list == nil {
		list = []int64{}
	}
	return history.ReadList(k, list)
}

func reg(f, k string, v int64, null bool) history.Mop {
	return history.Mop{F: f, Key: k, Int: v, Null: null}
}

// invoke opens an operation of process p; its micro-operations are the
// completion's, reads blanked.
func (b *builder) invoke(p int, f string, mops ...history.Mop) {
	inv := make([]history.Mop, len(mops))
	for i, m := range mops {
		inv[i] = m
		if m.F == history.MopRead {
			inv[i] = history.Mop{F: m.F, Key: m.Key, Null: true}
		}
	}
	op := history.Op{Process: history.Process(p), Type: history.Invoke, F: f, Mops: inv}
	b.record(op)
	b.open[p] = history.Op{Process: history.Process(p), F: f, Mops: mops}
}

// complete ends process p's operation as typ.
func (b *builder) complete(p int, typ history.Type) {
	op := b.open[p]
	delete(b.open, p)
	op.Type = typ
	if typ != history.OK {
		inv := make([]history.Mop, len(op.Mops))
		for i, m := range op.Mops {
			inv[i] = m
			if m.F == history.MopRead {
				inv[i] = history.Mop{F: m.F, Key: m.Key, Null: true}
			}
		}
		op.Mops = inv
	}
	b.record(op)
}

// txn invokes and completes a transaction at once.
func (b *builder) txn(p int, typ history.Type, mops ...history.Mop) {
	b.invoke(p, history.FTxn, mops...)
	b.complete(p, typ)
}

func (b *builder) record(op history.Op) {
	if _, err := b.w.Record(op); err != nil {
		b.t.Fatal(err)
	}
}

func (b *builder) check() *Result {
	b.t.Helper()
	if err := b.w.Flush(); err != nil {
		b.t.Fatal(err)
	}
	h, err := history.Read(&b.buf)
	if err != nil {
		b.t.Fatalf("the built history does not read back: %v", err)
	}
	return Check(h, Options{})
}

// TestPlantedAnomalies: each history has one anomaly planted, and the
// checker names it (and maybe others it implies), printing the operations.
func TestPlantedAnomalies(t *testing.T) {
	for _, tt := range planted {
		t.Run(tt.name, func(t *testing.T) { tt.run(t) })
	}
}

// plantedCase is a history with an anomaly planted.
type plantedCase struct {
	name  string
	build func(b *builder)
	want  []string // kinds that must be found
	texts []string // what the report must print
}

var planted = []plantedCase{
	{"G0 write cycle", func(b *builder) {
		b.invoke(1, history.FTxn, a("x", 1), a("y", 1))
		b.invoke(2, history.FTxn, a("x", 2), a("y", 2))
		b.complete(1, history.OK)
		b.complete(2, history.OK)
		b.txn(3, history.OK, r("x", 1, 2), r("y", 2, 1))
	}, []string{G0}, []string{`-ww-> T1`, `ww on "y": 2 then 1`, `[["append","x",2],["append","y",2]]`}},
	{"G1a aborted read", func(b *builder) {
		b.txn(1, history.Fail, a("x", 1))
		b.txn(2, history.OK, r("x", 1))
	}, []string{G1a}, []string{"which failed"}},
	{"G1b intermediate read", func(b *builder) {
		b.invoke(1, history.FTxn, a("x", 1), a("x", 2))
		b.txn(2, history.OK, r("x", 1))
		b.complete(1, history.OK)
	}, []string{G1b}, []string{"appended 2 after it"}},
	{"G1c circular information flow", func(b *builder) {
		b.invoke(1, history.FTxn, a("x", 1), r("y", 1))
		b.invoke(2, history.FTxn, a("y", 1), r("x", 1))
		b.complete(1, history.OK)
		b.complete(2, history.OK)
	}, []string{G1c}, []string{"-wr->", `wr on "x"`}},
	{"G-single read skew", func(b *builder) {
		b.invoke(1, history.FTxn, a("x", 1), a("y", 1))
		b.invoke(2, history.FTxn, r("x"), r("y", 1))
		b.complete(1, history.OK)
		b.complete(2, history.OK)
		b.txn(3, history.OK, r("x", 1))
	}, []string{GSingle}, []string{"-rw->", `rw on "x": read [], then 1 appended next`}},
	{"G2 write skew", func(b *builder) {
		b.invoke(1, history.FTxn, r("x"), a("y", 1))
		b.invoke(2, history.FTxn, r("y"), a("x", 1))
		b.complete(1, history.OK)
		b.complete(2, history.OK)
		b.txn(3, history.OK, r("x", 1), r("y", 1))
	}, []string{G2}, []string{"-rw->"}},
	{"stale read: G-single in real time, lost append", func(b *builder) {
		b.txn(1, history.OK, a("x", 1))
		b.txn(2, history.OK, r("x"))
		b.txn(3, history.OK, r("x", 1))
	}, []string{GSingle + RealtimeSuffix, LostAppend}, []string{"-realtime->", "without it"}},
	{"lost append", func(b *builder) {
		b.txn(1, history.OK, a("x", 1))
		b.txn(2, history.OK, a("x", 2))
		b.txn(3, history.OK, r("x", 2))
	}, []string{LostAppend}, []string{"appended 1"}},
	{"incompatible orders", func(b *builder) {
		b.invoke(1, history.FTxn, a("x", 1))
		b.invoke(2, history.FTxn, a("x", 2))
		b.complete(1, history.OK)
		b.complete(2, history.OK)
		b.invoke(3, history.FTxn, r("x", 1, 2))
		b.invoke(4, history.FTxn, r("x", 2, 1))
		b.complete(3, history.OK)
		b.complete(4, history.OK)
	}, []string{Incompatible}, []string{"neither is a prefix"}},
	{"duplicate elements", func(b *builder) {
		b.txn(1, history.OK, a("x", 1))
		b.txn(2, history.OK, r("x", 1, 1))
	}, []string{DuplicateRead}, []string{"with 1 twice"}},
	{"duplicate appends", func(b *builder) {
		b.txn(1, history.OK, a("x", 1))
		b.txn(2, history.OK, a("x", 1))
	}, []string{DuplicateAppend}, nil},
	{"garbage read", func(b *builder) {
		b.txn(1, history.OK, r("x", 9))
	}, []string{GarbageRead}, []string{"no operation appended"}},
	{"own append unseen", func(b *builder) {
		b.txn(1, history.OK, a("x", 5), r("x"))
	}, []string{Internal}, nil},
	{"register read of an old value", func(b *builder) {
		b.invoke(1, history.FRegister, reg("w", "k", 1, false))
		b.complete(1, history.OK)
		b.invoke(1, history.FRegister, reg("w", "k", 2, false))
		b.complete(1, history.OK)
		b.invoke(2, history.FRegister, reg("r", "k", 1, false))
		b.complete(2, history.OK)
	}, []string{NonLinearizable}, []string{`register "k"`, `"process":2`}},
	{"register unknown write seen, then unseen", func(b *builder) {
		b.invoke(1, history.FRegister, reg("w", "k", 1, false))
		b.complete(1, history.Info)
		b.invoke(2, history.FRegister, reg("r", "k", 1, false))
		b.complete(2, history.OK)
		b.invoke(2, history.FRegister, reg("r", "k", 0, true))
		b.complete(2, history.OK)
	}, []string{NonLinearizable}, nil},
}

func (tt plantedCase) run(t *testing.T) {
	b := newBuilder(t)
	tt.build(b)
	res := b.check()
	if res.Valid() {
		t.Fatalf("valid, want %v: %s", tt.want, res.Summary())
	}
	var texts []string
	for _, an := range res.Anomalies {
		texts = append(texts, an.Text)
	}
	all := strings.Join(texts, "\n")
	for _, k := range tt.want {
		if res.Counts[k] == 0 {
			t.Errorf("no %s: %s\n%s", k, res.Summary(), all)
		}
	}
	for _, s := range tt.texts {
		if !strings.Contains(all, s) {
			t.Errorf("the report does not print %q:\n%s", s, all)
		}
	}
}

// TestValidHistories: histories of a store that is strictly serializable
// show no anomaly, with unknown outcomes both taken and not taken.
func TestValidHistories(t *testing.T) {
	t.Run("unknown outcomes", func(t *testing.T) {
		b := newBuilder(t)
		b.txn(1, history.Info, a("x", 1)) // took effect, after 7 read
		b.txn(7, history.OK, r("x"))
		b.txn(2, history.Info, a("x", 2)) // did not
		b.txn(3, history.OK, r("x", 1))
		b.txn(4, history.Fail, a("x", 3))
		b.invoke(5, history.FRegister, reg("w", "k", 7, false))
		b.complete(5, history.Info)
		b.invoke(6, history.FRegister, reg("r", "k", 0, true))
		b.complete(6, history.OK)
		b.invoke(6, history.FRegister, reg("r", "k", 7, false))
		b.complete(6, history.OK)
		if res := b.check(); !res.Valid() {
			t.Fatalf("%s\n%v", res.Summary(), res.Anomalies)
		}
	})
	for seed := range uint64(5) {
		res := serialHistory(t, seed, 2000)
		if !res.Valid() {
			t.Fatalf("seed %d: %s\n%v", seed, res.Summary(), res.Anomalies)
		}
		if res.OK == 0 || res.Edges == 0 || res.KeysChecked == 0 {
			t.Fatalf("seed %d: nothing checked: %+v", seed, res)
		}
	}
}

// serialHistory simulates n transactions of 8 processes over 6 keys on a
// store that runs each at one instant between its invocation and its
// completion, and checks the history.
func serialHistory(t *testing.T, seed uint64, n int) *Result {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := newBuilder(t)
	state := map[string][]int64{}
	next := int64(0)
	pending := map[int][]history.Mop{} // process -> mops, run but not completed
	for range n {
		p := rng.IntN(8)
		if mops, ok := pending[p]; ok {
			b.open[p] = history.Op{Process: history.Process(p), F: history.FTxn, Mops: mops}
			typ := history.OK
			if rng.IntN(10) == 0 {
				typ = history.Info
			}
			b.complete(p, typ)
			delete(pending, p)
			continue
		}
		var mops []history.Mop
		for range 1 + rng.IntN(4) {
			k := string(rune('a' + rng.IntN(6)))
			if rng.IntN(2) == 0 {
				next++
				mops = append(mops, a(k, next))
			} else {
				mops = append(mops, r(k))
			}
		}
		b.invoke(p, history.FTxn, mops...)
		// It runs now, at once.
		for i, m := range mops {
			if m.F == history.MopAppend {
				state[m.Key] = append(state[m.Key], m.Int)
			} else {
				mops[i] = r(m.Key, slices.Clone(state[m.Key])...)
			}
		}
		pending[p] = mops
	}
	return b.check()
}

func TestSummary(t *testing.T) {
	b := newBuilder(t)
	b.txn(1, history.Fail, a("x", 1))
	b.txn(2, history.OK, r("x", 1))
	res := b.check()
	if got, want := res.Summary(), "operations 2 (ok 1, fail 1, info 0; txn 2, register 0), nemesis lines 0, anomalies 1: G1a 1"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
}

// TestModels: a cycle through real time breaks strict serializability
// only; a cycle of data dependencies breaks both.
func TestModels(t *testing.T) {
	stale := newBuilder(t)
	stale.txn(1, history.OK, a("x", 1))
	stale.txn(2, history.OK, r("x"))
	stale.txn(3, history.OK, r("x", 1))
	res := stale.check()
	if got := res.Violations(Serializable); got != 0 {
		t.Errorf("a stale read: %d violations of serializability, want 0: %s", got, res.Summary())
	}
	if got := res.Violations(StrictSerializable); got != 2 {
		t.Errorf("a stale read: %d violations of strict serializability, want 2 (a cycle, a lost append): %s", got, res.Summary())
	}
	skew := newBuilder(t)
	planted[5].build(skew) // G2
	if res := skew.check(); res.Violations(Serializable) != 1 || res.Violations(StrictSerializable) != 1 {
		t.Errorf("write skew: %s, want one violation of each model", res.Summary())
	}
	for _, s := range []string{"serializable", "strict-serializable"} {
		if m, err := ParseModel(s); err != nil || string(m) != s {
			t.Errorf("ParseModel(%q) = %q, %v", s, m, err)
		}
	}
	if _, err := ParseModel("linearizable"); err == nil {
		t.Error("ParseModel(linearizable): no error")
	}
}
