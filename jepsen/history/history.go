// Package history is the history format of DESIGN 10.4: JSON Lines in the
// manner of Jepsen's histories, one line per invocation and per completion,
// in real-time order, with the faults of the nemesis among them.
//
//	{"index":0,"time_ns":120,"process":3,"type":"invoke","f":"txn","value":[["append","k7",12],["r","k9",null]]}
//	{"index":1,"time_ns":4512,"process":3,"type":"ok","f":"txn","value":[["append","k7",12],["r","k9",[1,4]]]}
//	{"index":2,"time_ns":5000,"process":"nemesis","type":"info","f":"kill","value":{"phase":"start","target":"r4"}}
//
// A client operation is an invocation (type invoke) followed by its
// completion on the same process: ok (it took effect, with what it read),
// fail (it certainly took no effect) or info (unknown: it may have taken
// effect or not). f is txn (list appends and reads of lists) or register
// (one write or read of an integer register). Reader checks each line as it
// reads it, and its errors name the line.
package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
)

// Type is an operation's type.
type Type string

// The types of DESIGN 10.4.
const (
	Invoke Type = "invoke"
	OK     Type = "ok"
	Fail   Type = "fail"
	Info   Type = "info"
)

// The functions of client operations.
const (
	FTxn      = "txn"      // list appends and reads, in one transaction
	FRegister = "register" // one write or read of a register
)

// The micro-operations' functions.
const (
	MopAppend = "append" // append an integer to a list (txn)
	MopRead   = "r"      // read a list (txn) or a register
	MopWrite  = "w"      // write a register
)

// NemesisProcess is the process of the nemesis's lines.
const NemesisProcess = -1

// Process is an operation's process: a client (0 and up) or the nemesis,
// written "nemesis".
type Process int

// MarshalJSON writes a client's number or "nemesis".
func (p Process) MarshalJSON() ([]byte, error) {
	if p == NemesisProcess {
		return []byte(`"nemesis"`), nil
	}
	if p < 0 {
		return nil, fmt.Errorf("history: process %d", int(p))
	}
	return strconv.AppendInt(nil, int64(p), 10), nil
}

// UnmarshalJSON reads a client's number or "nemesis".
func (p *Process) UnmarshalJSON(b []byte) error {
	if string(b) == `"nemesis"` {
		*p = NemesisProcess
		return nil
	}
	n, err := strconv.ParseInt(string(b), 10, 32)
	if err != nil || n < 0 {
		return fmt.Errorf("process %s: want a number from 0 or \"nemesis\"", b)
	}
	*p = Process(n)
	return nil
}

// Mop is one micro-operation: [f, key, value]. Its value is null (Null),
// an integer (Int) or a list of integers (List, with IsList).
type Mop struct {
	F   string
	Key string
	// Null: the value is null (a read not done yet, or a register never
	// written).
	Null   bool
	Int    int64
	IsList bool
	List   []int64
}

// Append returns the micro-operation appending v to list key.
func Append(key string, v int64) Mop { return Mop{F: MopAppend, Key: key, Int: v} }

// ReadList returns a read of list key: unknown (nil, not yet done) or
// the list read.
func ReadList(key string, list []int64) Mop {
	if list == nil {
		return Mop{F: MopRead, Key: key, Null: true}
	}
	return Mop{F: MopRead, Key: key, IsList: true, List: list}
}

// MarshalJSON writes [f, key, value].
func (m Mop) MarshalJSON() ([]byte, error) {
	b := []byte{'['}
	f, _ := json.Marshal(m.F)
	k, _ := json.Marshal(m.Key)
	b = append(append(append(append(b, f...), ','), k...), ',')
	switch {
	case m.Null:
		b = append(b, "null"...)
	case m.IsList:
		b = append(b, '[')
		for i, v := range m.List {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, v, 10)
		}
		b = append(b, ']')
	default:
		b = strconv.AppendInt(b, m.Int, 10)
	}
	return append(b, ']'), nil
}

// UnmarshalJSON reads [f, key, value].
func (m *Mop) UnmarshalJSON(b []byte) error {
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil || len(parts) != 3 {
		return fmt.Errorf("micro-operation %s: want [f, key, value]", b)
	}
	*m = Mop{}
	if err := json.Unmarshal(parts[0], &m.F); err != nil {
		return fmt.Errorf("micro-operation %s: f is not a string", b)
	}
	if err := json.Unmarshal(parts[1], &m.Key); err != nil {
		return fmt.Errorf("micro-operation %s: key is not a string", b)
	}
	v := bytes.TrimSpace(parts[2])
	switch {
	case string(v) == "null":
		m.Null = true
	case len(v) > 0 && v[0] == '[':
		m.IsList = true
		m.List = []int64{}
		if err := json.Unmarshal(v, &m.List); err != nil {
			return fmt.Errorf("micro-operation %s: value is not a list of integers", b)
		}
	default:
		if err := json.Unmarshal(v, &m.Int); err != nil {
			return fmt.Errorf("micro-operation %s: value is not null, an integer or a list of integers", b)
		}
	}
	return nil
}

// Fault is the value of a nemesis line: a fault's phase (start or end),
// its target (a replica, a region) and any detail.
type Fault struct {
	Phase  string `json:"phase"`
	Target string `json:"target,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// The phases of a fault.
const (
	PhaseStart = "start"
	PhaseEnd   = "end"
)

// Op is one line of a history. A client operation's value is its
// micro-operations (Mops: a txn's list, a register's one); a nemesis
// line's is its Fault.
type Op struct {
	Index   int64
	TimeNs  int64
	Process Process
	Type    Type
	F       string
	Mops    []Mop
	Fault   *Fault
}

// line is Op as JSON, its fields in DESIGN 10.4's order.
type line struct {
	Index   *int64          `json:"index"`
	TimeNs  *int64          `json:"time_ns"`
	Process *Process        `json:"process"`
	Type    Type            `json:"type"`
	F       string          `json:"f"`
	Value   json.RawMessage `json:"value"`
}

// MarshalJSON writes op as one line of DESIGN 10.4 (without the newline).
func (op Op) MarshalJSON() ([]byte, error) {
	var value []byte
	var err error
	switch {
	case op.Process == NemesisProcess:
		value, err = json.Marshal(op.Fault)
	case op.F == FRegister && len(op.Mops) == 1:
		value, err = json.Marshal(op.Mops[0])
	default:
		value, err = json.Marshal(op.Mops)
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(line{Index: &op.Index, TimeNs: &op.TimeNs, Process: &op.Process, Type: op.Type, F: op.F, Value: value})
}

// errLine is the class of every error about one line of a history.
var errLine = errors.New("history: bad line")

// LineError is an error about line Line (from 1) of a history.
type LineError struct {
	Line int
	Err  error
}

// Error names the line and the problem.
func (e *LineError) Error() string { return fmt.Sprintf("history: line %d: %v", e.Line, e.Err) }

// Unwrap returns the problem.
func (e *LineError) Unwrap() error { return e.Err }

// Is matches ErrBadLine.
func (e *LineError) Is(target error) bool { return target == errLine }

// ErrBadLine is matched (errors.Is) by every error of Read about a line.
var ErrBadLine = errLine
