package history

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// design is DESIGN 10.4's example, with a nemesis line and a register.
const design = `{"index":0,"time_ns":120,"process":3,"type":"invoke","f":"txn","value":[["append","k7",12],["r","k9",null]]}
{"index":1,"time_ns":4512,"process":3,"type":"ok","f":"txn","value":[["append","k7",12],["r","k9",[1,4]]]}
{"index":2,"time_ns":5000,"process":"nemesis","type":"info","f":"kill","value":{"phase":"start","target":"r4"}}
{"index":3,"time_ns":5001,"process":1,"type":"invoke","f":"register","value":["w","x",3]}
{"index":4,"time_ns":6000,"process":1,"type":"info","f":"register","value":["w","x",3]}
{"index":5,"time_ns":6001,"process":2,"type":"invoke","f":"register","value":["r","x",null]}
{"index":6,"time_ns":6002,"process":2,"type":"ok","f":"register","value":["r","x",null]}
{"index":7,"time_ns":6003,"process":4,"type":"invoke","f":"txn","value":[["r","k9",null]]}
`

func TestReadWriteRoundTrip(t *testing.T) {
	h, err := Read(strings.NewReader(design))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := h.Pairs, []Pair{{0, 1}, {3, 4}, {5, 6}, {7, -1}}; !cmp.Equal(got, want) {
		t.Errorf("pairs %v, want %v", got, want)
	}
	if got := h.Outcome(h.Pairs[3]); got != Info {
		t.Errorf("an operation the history never completes: %s, want info", got)
	}
	if got := h.Ops[1].Mops[1].List; !cmp.Equal(got, []int64{1, 4}) {
		t.Errorf("read %v, want [1 4]", got)
	}
	var buf bytes.Buffer
	clock := []int64{120, 4512, 5000, 5001, 6000, 6001, 6002, 6003}
	w := NewWriter(&buf, func() int64 { t := clock[0]; clock = clock[1:]; return t })
	for _, op := range h.Ops {
		if _, err := w.Record(op); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(design, buf.String()); diff != "" {
		t.Errorf("written history differs from the one read (-want +got):\n%s", diff)
	}
}

// TestReadNamesTheLine: every malformed or truncated history is refused
// with the number of its first bad line and the problem.
func TestReadNamesTheLine(t *testing.T) {
	lines := strings.Split(strings.TrimSuffix(design, "\n"), "\n")
	ok := func(n int) string { return strings.Join(lines[:n], "\n") + "\n" }
	tests := []struct {
		name, history string
		line          int
		want          string
	}{
		{"truncated mid-line", ok(2) + lines[2][:40], 3, "not a JSON object"},
		{"not JSON", ok(1) + "hello\n", 2, "not a JSON object"},
		{"empty line", ok(1) + "\n" + lines[1], 2, "empty line"},
		{"unknown field", `{"index":0,"time_ns":1,"process":0,"type":"invoke","f":"txn","value":[["r","k",null]],"x":1}`, 1, "unknown field"},
		{"no index", `{"time_ns":1,"process":0,"type":"invoke","f":"txn","value":[["r","k",null]]}`, 1, `no "index"`},
		{"no value", `{"index":0,"time_ns":1,"process":0,"type":"invoke","f":"txn"}`, 1, `no "value"`},
		{"index out of sequence", ok(1) + strings.Replace(lines[1], `"index":1`, `"index":5`, 1), 2, "index 5, want 1"},
		{"time backwards", ok(1) + strings.Replace(lines[1], `4512`, `100`, 1), 2, "before the line above"},
		{"bad type", strings.Replace(lines[0], `"invoke"`, `"done"`, 1), 1, `type "done"`},
		{"bad f", strings.Replace(lines[0], `"txn"`, `"cas"`, 1), 1, `f "cas"`},
		{"bad process", strings.Replace(lines[0], `"process":3`, `"process":-2`, 1), 1, "process -2"},
		{"unknown mop", strings.Replace(lines[0], `"append"`, `"prepend"`, 1), 1, `function "prepend"`},
		{"mop of two", strings.Replace(lines[0], `["r","k9",null]`, `["r","k9"]`, 1), 1, "want [f, key, value]"},
		{"append of a list", strings.Replace(lines[0], `12]`, `[12]]`, 1), 1, "writes no integer"},
		{"invoke with a read value", strings.Replace(lines[0], `null`, `[1]`, 1), 1, "want null"},
		{"empty txn", `{"index":0,"time_ns":1,"process":0,"type":"invoke","f":"txn","value":[]}`, 1, "0 micro-operations"},
		{"completion without invocation", strings.Replace(lines[1], `"index":1`, `"index":0`, 1), 1, "never invoked"},
		{"second invocation", ok(1) + strings.Replace(lines[0], `"index":0`, `"index":1`, 1), 2, "while its operation of line 1 is open"},
		{"completion of another mop", ok(1) + strings.Replace(lines[1], `"k7"`, `"k8"`, 1), 2, "its invocation's (line 1)"},
		{"completion of another value", ok(1) + strings.Replace(lines[1], `12]`, `13]`, 1), 2, `writes ["append","k7",13]`},
		{"ok read without a list", ok(1) + strings.Replace(lines[1], `[1,4]`, `null`, 1), 2, "has no list"},
		{"nemesis not info", ok(2) + strings.Replace(lines[2], `"info"`, `"ok"`, 1), 3, "want info"},
		{"nemesis bad phase", ok(2) + strings.Replace(lines[2], `"start"`, `"begin"`, 1), 3, `phase "begin"`},
		{"register of a list", ok(5) + strings.Replace(lines[5], `null`, `[1]`, 1), 6, "want null"},
		{"register append", ok(3) + strings.Replace(lines[3], `"w"`, `"append"`, 1), 4, `"append" in a register`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Read(strings.NewReader(tt.history))
			var le *LineError
			if !errors.As(err, &le) || !errors.Is(err, ErrBadLine) {
				t.Fatalf("error %v, want a LineError", err)
			}
			if le.Line != tt.line || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q, want line %d and %q", err, tt.line, tt.want)
			}
		})
	}
}

func TestReadLineTooLong(t *testing.T) {
	long := strings.Repeat(" ", LineBytesMax+1)
	_, err := Read(strings.NewReader(design + long + "\n"))
	if err == nil || !strings.Contains(err.Error(), "line 9: longer than") {
		t.Errorf("error %v, want line 9 too long", err)
	}
}

// FuzzRead: Read never panics, and what it accepts it writes back as a
// history it reads alike.
func FuzzRead(f *testing.F) {
	f.Add(design)
	f.Add(`{"index":0,"time_ns":1,"process":0,"type":"invoke","f":"register","value":["r","k",null]}`)
	f.Add(`{"index":0,"time_ns":1,"process":"nemesis","type":"info","f":"kill","value":{"phase":"end"}}`)
	f.Fuzz(func(t *testing.T, s string) {
		h, err := Read(strings.NewReader(s))
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.Line < 1 {
				t.Fatalf("error %v names no line", err)
			}
			return
		}
		var buf bytes.Buffer
		i := 0
		w := NewWriter(&buf, func() int64 { t := h.Ops[i].TimeNs; i++; return t })
		for _, op := range h.Ops {
			if _, err := w.Record(op); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		again, err := Read(&buf)
		if err != nil {
			t.Fatalf("a history read back does not read: %v\n%s", err, buf.String())
		}
		if !cmp.Equal(h, again) {
			t.Fatalf("read back differs: %s", cmp.Diff(h, again))
		}
	})
}
