package checker

import (
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/flexkv/flexkv/jepsen/history"
)

// regInput is a register operation: a write of v, or a read.
type regInput struct {
	write bool
	v     int64
}

// regValue is a register's state or a read's result; null: never written.
type regValue struct {
	null bool
	v    int64
}

func (r regValue) String() string {
	if r.null {
		return "null"
	}
	return fmt.Sprint(r.v)
}

// registerModel is one integer register that starts unwritten.
var registerModel = porcupine.Model{
	Init: func() any { return regValue{null: true} },
	Step: func(state, input, output any) (bool, any) {
		in := input.(regInput)
		if in.write {
			return true, regValue{v: in.v}
		}
		return output.(regValue) == state.(regValue), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		if in.write {
			return fmt.Sprintf("w %d", in.v)
		}
		return fmt.Sprintf("r -> %v", output)
	},
}

// checkRegisters checks every register key for linearizability. A write
// whose outcome is unknown (info) may take effect at any time after its
// invocation, so it returns at the end of time; a failed write and a read
// that did not complete ok took no effect and are left out.
func checkRegisters(h *history.History, opt Options, r *Result) {
	byKey := map[string][]porcupine.Operation{}
	lines := map[string][]history.Op{}
	for _, p := range h.Pairs {
		inv := h.Ops[p.Invoke]
		if inv.F != history.FRegister {
			continue
		}
		outcome := h.Outcome(p)
		m := inv.Mops[0]
		op := porcupine.Operation{ClientId: int(inv.Process), Call: inv.TimeNs, Return: math.MaxInt64}
		switch {
		case outcome == history.Fail, m.F == history.MopRead && outcome != history.OK:
			continue
		case m.F == history.MopWrite:
			op.Input = regInput{write: true, v: m.Int}
			op.Output = regValue{}
		default:
			got := h.Ops[p.Done].Mops[0]
			op.Input = regInput{}
			op.Output = regValue{null: got.Null, v: got.Int}
		}
		if outcome == history.OK {
			op.Return = h.Ops[p.Done].TimeNs
		}
		byKey[m.Key] = append(byKey[m.Key], op)
		lines[m.Key] = append(lines[m.Key], inv)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey { //flexkv:unordered sorted below
		keys = append(keys, k)
	}
	slices.Sort(keys)
	r.RegisterKeys = len(keys)
	for _, k := range keys {
		res, info := porcupine.CheckOperationsVerbose(registerModel, byKey[k], opt.RegisterTimeout)
		switch res {
		case porcupine.Ok:
		case porcupine.Illegal:
			r.report(NonLinearizable, opt.ExamplesMax, func() string { return registerText(k, byKey[k], lines[k], info) })
		default:
			// Not an anomaly: undecided. Counted apart, printed.
			r.Unchecked++
			r.Anomalies = append(r.Anomalies, Anomaly{Kind: RegisterUnknown, Text: fmt.Sprintf(
				"register %q: porcupine did not decide its %d operations within %v", k, len(byKey[k]), opt.RegisterTimeout)})
		}
	}
}

// registerText prints a key's history that has no linearization: the
// longest linearizable prefix porcupine found, and the operations it
// could not place.
func registerText(k string, ops []porcupine.Operation, lines []history.Op, info porcupine.LinearizationInfo) string {
	var longest []int
	for _, part := range info.PartialLinearizations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := map[int]bool{}
	for _, i := range longest {
		placed[i] = true
	}
	var b strings.Builder
	fmt.Fprintf(&b, "register %q: no linearization of its %d operations; the longest linearizable prefix orders %d:\n", k, len(ops), len(longest))
	for _, i := range longest {
		fmt.Fprintf(&b, "    %s\n", registerModel.DescribeOperation(ops[i].Input, ops[i].Output))
	}
	b.WriteString("  operations it cannot place after them (invocations):\n")
	shown := 0
	for i := range ops {
		if placed[i] || shown == 10 {
			continue
		}
		shown++
		fmt.Fprintf(&b, "    %s -> %s\n", opLine(lines[i]), registerModel.DescribeOperation(ops[i].Input, ops[i].Output))
	}
	return strings.TrimSuffix(b.String(), "\n")
}
