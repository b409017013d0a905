package history

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Bounds of what Read accepts: a line and a transaction.
const (
	LineBytesMax = 16 << 20
	MopsMax      = 1024
)

// History is a history as Read checked it.
type History struct {
	Ops []Op
	// Pairs are the client operations, by invocation: each invocation's
	// index in Ops and its completion's (-1 when the history ends before
	// it completed: unknown, as info).
	Pairs []Pair
}

// Pair is a client operation: its invocation and completion.
type Pair struct {
	Invoke, Done int
}

// Outcome returns the type of p's completion, info when it has none.
func (h *History) Outcome(p Pair) Type {
	if p.Done < 0 {
		return Info
	}
	return h.Ops[p.Done].Type
}

// Read reads and checks a history. Its error names the first line that is
// malformed (not JSON, a field missing or of the wrong kind, a value that
// is not DESIGN 10.4's) or that does not fit the lines before it (an
// index out of sequence, time going backwards, a completion without an
// invocation, a second invocation on a busy process, a completion whose
// micro-operations are not its invocation's).
func Read(r io.Reader) (*History, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), LineBytesMax)
	h := &History{}
	busy := map[Process]int{} // process -> index in Pairs of its open operation
	n := 0
	for sc.Scan() {
		n++
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			return nil, &LineError{Line: n, Err: errors.New("empty line")}
		}
		op, err := decodeLine(b)
		if err == nil {
			err = h.add(op, busy)
		}
		if err != nil {
			return nil, &LineError{Line: n, Err: err}
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d bytes", LineBytesMax)
		}
		return nil, &LineError{Line: n + 1, Err: err}
	}
	return h, nil
}

// add appends op, checked against the lines before it.
func (h *History) add(op Op, busy map[Process]int) error {
	if want := int64(len(h.Ops)); op.Index != want {
		return fmt.Errorf("index %d, want %d (indices count lines from 0)", op.Index, want)
	}
	if k := len(h.Ops); k > 0 && op.TimeNs < h.Ops[k-1].TimeNs {
		return fmt.Errorf("time_ns %d is before the line above's %d: lines are in real-time order", op.TimeNs, h.Ops[k-1].TimeNs)
	}
	at := len(h.Ops)
	if op.Process != NemesisProcess {
		open, isBusy := busy[op.Process]
		switch {
		case op.Type == Invoke && isBusy:
			return fmt.Errorf("process %d invokes while its operation of line %d is open", op.Process, h.Pairs[open].Invoke+1)
		case op.Type == Invoke:
			busy[op.Process] = len(h.Pairs)
			h.Pairs = append(h.Pairs, Pair{Invoke: at, Done: -1})
		case !isBusy:
			return fmt.Errorf("process %d completes (%s) an operation it never invoked", op.Process, op.Type)
		default:
			if err := matches(h.Ops[h.Pairs[open].Invoke], op); err != nil {
				return err
			}
			h.Pairs[open].Done = at
			delete(busy, op.Process)
		}
	}
	h.Ops = append(h.Ops, op)
	return nil
}

// matches checks that completion done fits invocation inv.
func matches(inv, done Op) error {
	if inv.F != done.F {
		return fmt.Errorf("completion's f %q, its invocation's (line %d) %q", done.F, inv.Index+1, inv.F)
	}
	if len(inv.Mops) != len(done.Mops) {
		return fmt.Errorf("completion has %d micro-operations, its invocation (line %d) %d", len(done.Mops), inv.Index+1, len(inv.Mops))
	}
	for i, m := range done.Mops {
		w := inv.Mops[i]
		if m.F != w.F || m.Key != w.Key {
			return fmt.Errorf("micro-operation %d is [%q %q], its invocation's (line %d) [%q %q]", i, m.F, m.Key, inv.Index+1, w.F, w.Key)
		}
		if m.F != MopRead && (m.Int != w.Int || m.Null != w.Null) {
			return fmt.Errorf("micro-operation %d writes %s, its invocation (line %d) %s", i, mopValue(m), inv.Index+1, mopValue(w))
		}
		if m.F == MopRead && done.Type == OK && done.F == FTxn && !m.IsList {
			return fmt.Errorf("micro-operation %d: an ok read of list %q has no list", i, m.Key)
		}
	}
	return nil
}

func mopValue(m Mop) string {
	b, _ := m.MarshalJSON()
	return string(b)
}

// decodeLine decodes one line and checks it alone.
func decodeLine(b []byte) (Op, error) {
	var l line
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		return Op{}, fmt.Errorf("not a JSON object of DESIGN 10.4: %w", err)
	}
	if dec.More() {
		return Op{}, errors.New("more than one JSON value")
	}
	switch {
	case l.Index == nil:
		return Op{}, errors.New(`no "index"`)
	case l.TimeNs == nil:
		return Op{}, errors.New(`no "time_ns"`)
	case l.Process == nil:
		return Op{}, errors.New(`no "process"`)
	case l.F == "":
		return Op{}, errors.New(`no "f"`)
	case len(l.Value) == 0:
		return Op{}, errors.New(`no "value"`)
	}
	op := Op{Index: *l.Index, TimeNs: *l.TimeNs, Process: *l.Process, Type: l.Type, F: l.F}
	switch op.Type {
	case Invoke, OK, Fail, Info:
	default:
		return Op{}, fmt.Errorf("type %q: want invoke, ok, fail or info", op.Type)
	}
	if op.Process == NemesisProcess {
		return op, decodeFault(&op, l.Value)
	}
	return op, decodeMops(&op, l.Value)
}

func decodeFault(op *Op, value json.RawMessage) error {
	if op.Type != Info {
		return fmt.Errorf("a nemesis line of type %q: want info", op.Type)
	}
	var f Fault
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("nemesis value %s: want {\"phase\":..., \"target\":...}: %w", value, err)
	}
	if f.Phase != PhaseStart && f.Phase != PhaseEnd {
		return fmt.Errorf("nemesis phase %q: want start or end", f.Phase)
	}
	op.Fault = &f
	return nil
}

func decodeMops(op *Op, value json.RawMessage) error {
	switch op.F {
	case FTxn:
		if err := json.Unmarshal(value, &op.Mops); err != nil {
			return fmt.Errorf("txn value: %w", err)
		}
		if len(op.Mops) == 0 || len(op.Mops) > MopsMax {
			return fmt.Errorf("txn of %d micro-operations: want 1 to %d", len(op.Mops), MopsMax)
		}
	case FRegister:
		var m Mop
		if err := json.Unmarshal(value, &m); err != nil {
			return fmt.Errorf("register value: %w", err)
		}
		op.Mops = []Mop{m}
	default:
		return fmt.Errorf("f %q: want txn or register", op.F)
	}
	for i, m := range op.Mops {
		if err := checkMop(op, m); err != nil {
			return fmt.Errorf("micro-operation %d %s: %w", i, mopValue(m), err)
		}
	}
	return nil
}

// checkMop checks a micro-operation's function and value against its
// operation's.
func checkMop(op *Op, m Mop) error {
	reg := op.F == FRegister
	switch {
	case m.Key == "":
		return errors.New("empty key")
	case m.F == MopAppend && reg, m.F == MopWrite && !reg:
		return fmt.Errorf("%q in a %s", m.F, op.F)
	case m.F == MopAppend || m.F == MopWrite:
		if m.Null || m.IsList {
			return errors.New("writes no integer")
		}
	case m.F == MopRead:
		switch {
		case op.Type == Invoke && !m.Null:
			return errors.New("an invocation's read has a value: want null")
		case reg && m.IsList:
			return errors.New("a register read a list")
		case !reg && !m.Null && !m.IsList:
			return errors.New("a list read an integer")
		}
	default:
		return fmt.Errorf("function %q: want append or r (txn), w or r (register)", m.F)
	}
	return nil
}
