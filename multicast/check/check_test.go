package check

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func mustScript(t *testing.T, text string) []Record {
	t.Helper()
	recs, err := parseScript(text)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// propertyCase is a hand-made log, the options it is checked with and how
// often each property it violates is violated.
type propertyCase struct {
	name string
	opt  Options
	log  string
	want map[string]int
}

// propertyCases are TestProperties' logs.
var propertyCases = []propertyCase{
	{
		name: "valid",
		opt:  Options{Complete: true, Genuine: true},
		log: `
			multicast m1 A B
			multicast m2 A B C
			multicast m3 B C
			multicast m4 C
			send A B msg m1
			send A B msg m2
			send A C msg m2
			send B C ack m2
			send B C relay m3
			send B C ts m3
			send C B vote m3
			send A B msg flush.1
			send A Z msg flush.1
			deliver A/r1 m1 m2
			deliver A/r2 m1 m2
			deliver B m1 m2 m3
			deliver C m4 m2 m3`,
		want: map[string]int{},
	},
	{
		name: "three-group cycle passes every pairwise check",
		log: `
			multicast m1 A C
			multicast m2 A B
			multicast m3 B C
			deliver A m1 m2
			deliver B m2 m3
			deliver C m3 m1`,
		want: map[string]int{AcyclicOrder: 1},
	},
	{
		name: "two-group swap",
		log: `
			multicast m1 A B
			multicast m2 A B
			deliver A m1 m2
			deliver B m2 m1`,
		want: map[string]int{PrefixOrder: 1, AcyclicOrder: 1},
	},
	{
		name: "gap: B delivers m2 without m1, which A delivered before m2",
		log: `
			multicast m1 A B
			multicast m2 A B
			deliver A m1 m2
			deliver B m2`,
		want: map[string]int{PrefixOrder: 1},
	},
	{
		name: "a lagging group is a prefix",
		log: `
			multicast m1 A B
			multicast m2 A B
			deliver A m1 m2
			deliver B m1`,
		want: map[string]int{},
	},
	{
		name: "messages to other groups in between do not matter",
		log: `
			multicast m1 A B
			multicast m2 A C
			multicast m3 A B
			multicast m4 B C
			deliver A m1 m2 m3
			deliver B m1 m4 m3
			deliver C m2 m4`,
		want: map[string]int{},
	},
	{
		name: "duplicate delivery",
		log: `
			multicast m1 A
			multicast m2 A
			deliver A m1 m2 m1`,
		want: map[string]int{Integrity: 1},
	},
	{
		name: "delivery at a non-destination",
		log: `
			multicast m1 A
			deliver A m1
			deliver B m1=A`,
		want: map[string]int{Integrity: 1},
	},
	{
		name: "delivery of a message never multicast",
		log: `
			multicast m1 A
			deliver A m1 m9`,
		want: map[string]int{Integrity: 1},
	},
	{
		name: "delivery of a flush",
		log: `
			deliver A flush.3`,
		want: map[string]int{Integrity: 1},
	},
	{
		name: "delivery with another dst than the multicast",
		log: `
			multicast m1 A B
			deliver A m1=A,C
			deliver B m1`,
		want: map[string]int{Integrity: 1},
	},
	{
		name: "dst order does not matter",
		log: `
			multicast m1 A B
			deliver A m1=B,A`,
		want: map[string]int{},
	},
	{
		name: "the same id multicast to two dsts",
		log: `
			multicast m1 A B
			multicast m1 A C`,
		want: map[string]int{Integrity: 1},
	},
	{
		name: "a re-submission with the same dst",
		log: `
			multicast m1 A B
			multicast m1 B A
			deliver A m1
			deliver B m1`,
		want: map[string]int{},
	},
	{
		name: "deliver before multicast in the log",
		opt:  Options{Complete: true},
		log: `
			deliver A m1=A,B
			deliver B m1=A,B
			multicast m1 A B`,
		want: map[string]int{},
	},
	{
		name: "replicas disagree",
		log: `
			multicast m1 A
			multicast m2 A
			multicast m3 A
			deliver A/r1 m1 m2 m3
			deliver A/r2 m1 m3
			deliver A/r3 m1 m2`,
		want: map[string]int{ReplicaAgreement: 1},
	},
	{
		name: "a missing delivery without Complete",
		log: `
			multicast m1 A B
			deliver A/r1 m1
			deliver A/r2 m1`,
		want: map[string]int{},
	},
	{
		name: "a missing delivery at one replica",
		opt:  Options{Complete: true},
		log: `
			multicast m1 A B
			multicast m2 A
			deliver A/r1 m1 m2
			deliver A/r2 m1
			deliver B m1`,
		want: map[string]int{Agreement: 1},
	},
	{
		name: "a destination without any delivery",
		opt:  Options{Complete: true},
		log: `
			multicast m1 A B
			deliver A m1`,
		want: map[string]int{Agreement: 1},
	},
	{
		name: "a message delivered nowhere",
		opt:  Options{Complete: true},
		log: `
			multicast m1 A B
			multicast m2 A
			deliver A m2`,
		want: map[string]int{Validity: 1},
	},
	{
		name: "a foreign delivery does not count for completeness",
		opt:  Options{Complete: true},
		log: `
			multicast m1 A
			deliver B m1=A`,
		want: map[string]int{Integrity: 1, Validity: 1},
	},
	{
		name: "sends about an unknown id with Complete",
		opt:  Options{Complete: true},
		log: `
			send A B msg m9
			send B A ack m9
			send A B ack m8`,
		want: map[string]int{Integrity: 2},
	},
	{
		name: "sends about an unknown id without Complete",
		opt:  Options{Genuine: true},
		log: `
			send A B msg m9`,
		want: map[string]int{},
	},
	{
		name: "genuine: a send from a non-destination",
		opt:  Options{Genuine: true},
		log: `
			multicast m1 A B
			send C B msg m1`,
		want: map[string]int{Genuineness: 1},
	},
	{
		name: "genuine: a send to a non-destination",
		opt:  Options{Genuine: true},
		log: `
			multicast m1 A B
			send A C msg m1`,
		want: map[string]int{Genuineness: 1},
	},
	{
		name: "genuine: notif to a group addressed earlier, and its ack",
		opt:  Options{Genuine: true},
		log: `
			multicast m1 B C
			multicast m2 A B
			multicast m3 A C
			send A B notif m3
			send B C ack m3
			send A C msg m3`,
		want: map[string]int{},
	},
	{
		name: "genuine: a notified group notifies further",
		opt:  Options{Genuine: true},
		log: `
			multicast m1 B
			multicast m2 C
			multicast m3 A D
			send A B notif m3
			send B C notif m3
			send C D ack m3`,
		want: map[string]int{},
	},
	{
		name: "genuine: the ack line may come before the notif line",
		opt:  Options{Genuine: true},
		log: `
			multicast m2 A B
			multicast m3 A C
			send B C ack m3
			send A B notif m3`,
		want: map[string]int{},
	},
	{
		name: "genuine: notif to a group never addressed",
		opt:  Options{Genuine: true},
		log: `
			multicast m3 A C
			send A B notif m3
			send B C ack m3`,
		want: map[string]int{Genuineness: 1},
	},
	{
		name: "genuine: notif to a group addressed only later",
		opt:  Options{Genuine: true},
		log: `
			multicast m3 A C
			send A B notif m3
			multicast m4 B`,
		want: map[string]int{Genuineness: 1},
	},
	{
		name: "genuine: notif from a group not entitled",
		opt:  Options{Genuine: true},
		log: `
			multicast m1 B
			multicast m3 A C
			send D B notif m3
			send B C ack m3`,
		want: map[string]int{Genuineness: 2},
	},
	{
		name: "without Genuine, a tree protocol's forwarding is fine",
		log: `
			multicast m1 B C
			send A B msg m1
			send A C msg m1`,
		want: map[string]int{},
	},
	{
		name: "flush traffic is never checked",
		opt:  Options{Complete: true, Genuine: true},
		log: `
			send A B msg flush.1
			send B C ack flush.1`,
		want: map[string]int{},
	},
}

// TestProperties checks, for small hand-made logs, exactly which properties
// are violated and how often.
func TestProperties(t *testing.T) {
	for _, tt := range propertyCases {
		t.Run(tt.name, func(t *testing.T) {
			rep := Check(mustScript(t, tt.log), tt.opt)
			if diff := cmp.Diff(tt.want, rep.ViolationCounts, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("violation counts (-want +got):\n%s\nviolations: %v", diff, rep.Violations)
			}
			if got, want := rep.OK(), len(tt.want) == 0; got != want {
				t.Errorf("OK() = %v, want %v", got, want)
			}
			for _, v := range rep.Violations {
				if v.Detail == "" || len(v.IDs) == 0 {
					t.Errorf("violation without detail or ids: %+v", v)
				}
			}
		})
	}
}

// TestCycleIDs checks that the reported cycle is the cycle, in order.
func TestCycleIDs(t *testing.T) {
	rep := Check(mustScript(t, `
		multicast m0 X
		multicast m1 A C
		multicast m2 A B
		multicast m3 B C
		deliver X m0
		deliver A m1 m2
		deliver B m2 m3
		deliver C m3 m1`), Options{})
	if len(rep.Violations) != 1 {
		t.Fatalf("got violations %v, want one", rep.Violations)
	}
	v := rep.Violations[0]
	if diff := cmp.Diff([]string{"m1", "m2", "m3"}, v.IDs); diff != "" {
		t.Errorf("cycle ids (-want +got):\n%s", diff)
	}
	if want := "cycle m1 -> m2 -> m3 -> m1 (orders of A, B, C)"; v.Detail != want {
		t.Errorf("detail = %q, want %q", v.Detail, want)
	}
}

// TestCycles checks that every strongly connected component counts, and
// that the cycle reported is a real one within a larger component.
func TestCycles(t *testing.T) {
	rep := Check(mustScript(t, `
		multicast a1 A B
		multicast a2 A B
		multicast b1 C D
		multicast b2 C E
		multicast b3 D E
		multicast b4 C D2
		deliver A a1 a2
		deliver B a2 a1
		deliver C b1 b2 b4
		deliver D b3 b1
		deliver E b2 b3
		deliver D2 b4`), Options{})
	if got := rep.ViolationCounts[AcyclicOrder]; got != 2 {
		t.Fatalf("acyclic-order violations = %d, want 2: %v", got, rep.Violations)
	}
	var cycles [][]string
	for _, v := range rep.Violations {
		if v.Property == AcyclicOrder {
			cycles = append(cycles, v.IDs)
		}
	}
	want := [][]string{{"a1", "a2"}, {"b1", "b2", "b3"}}
	if diff := cmp.Diff(want, cycles); diff != "" {
		t.Errorf("cycles (-want +got):\n%s", diff)
	}
}

func TestDetailsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("multicast m1 A\n")
	for range 20 {
		b.WriteString("deliver A m1\n")
	}
	rep := Check(mustScript(t, b.String()), Options{DetailsMax: 3})
	if got, want := rep.ViolationCounts[Integrity], 19; got != want {
		t.Errorf("integrity count = %d, want %d", got, want)
	}
	if got, want := len(rep.Violations), 3; got != want {
		t.Errorf("described violations = %d, want %d", got, want)
	}
	if got, want := rep.Violations[2].Detail, "A/r1 delivered m1 twice (deliveries #1 and #4)"; got != want {
		t.Errorf("third detail = %q, want %q", got, want)
	}
	if got, want := rep.Summary(), "FAIL: 19 violations: integrity: A/r1 delivered m1 twice (deliveries #1 and #2) (first of 19)"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}

func TestSummary(t *testing.T) {
	recs := mustScript(t, `
		multicast m1 A B
		multicast m2 A B
		deliver A/r1 m1 m2
		deliver A/r2 m1 m2
		deliver B m1 m2
		send A B msg m1
		send A B msg m2
		send B A ack m2
		send A B msg flush.1`)
	rep := Check(recs, Options{Complete: true, Genuine: true})
	if got, want := rep.Summary(), "ok: 2 messages, 2 groups, 3 replicas, 6 deliveries, 4 sends"; got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
	if diff := cmp.Diff(map[string]int{"msg": 3, "ack": 1}, rep.SendsByKind); diff != "" {
		t.Errorf("sends by kind (-want +got):\n%s", diff)
	}
	if got, want := rep.BytesTotal, int64(40); got != want {
		t.Errorf("bytes = %d, want %d", got, want)
	}

	rep = Check(mustScript(t, `
		multicast m1 A B
		multicast m2 A B
		deliver A m1 m2 m2
		deliver B m2 m1`), Options{})
	want := "FAIL: 3 violations (integrity 1, prefix-order 1, acyclic-order 1): integrity: A/r1 delivered m2 twice (deliveries #2 and #3)"
	if got := rep.Summary(); got != want {
		t.Errorf("summary = %q, want %q", got, want)
	}
}

func TestAddRejectsMalformed(t *testing.T) {
	bad := []Record{
		{},
		{Ev: "flush", ID: "m1"},
		{Ev: EvMulticast, ID: "m1"},
		{Ev: EvMulticast, Dst: []string{"A"}},
		{Ev: EvMulticast, ID: "m1", Dst: []string{"A", "A"}},
		{Ev: EvMulticast, ID: "m1", Dst: []string{"A", ""}},
		{Ev: EvMulticast, ID: "flush.1", Dst: []string{"A"}},
		{Ev: EvMulticast, ID: "m1", Dst: []string{"A"}, Group: "A"},
		{Ev: EvDeliver, Group: "A", ID: "m1", Dst: []string{"A"}},
		{Ev: EvDeliver, Replica: "r1", ID: "m1", Dst: []string{"A"}},
		{Ev: EvDeliver, Group: "A", Replica: "r1", ID: "m1"},
		{Ev: EvDeliver, Group: "A", Replica: "r1", ID: "m1", Dst: []string{"A"}, Bytes: 3},
		{Ev: EvSend, From: "A", To: "B", Kind: "gossip", About: "m1"},
		{Ev: EvSend, From: "A", To: "B", About: "m1"},
		{Ev: EvSend, To: "B", Kind: "msg", About: "m1"},
		{Ev: EvSend, From: "A", Kind: "msg", About: "m1"},
		{Ev: EvSend, From: "A", To: "B", Kind: "msg"},
		{Ev: EvSend, From: "A", To: "B", Kind: "msg", About: "m1", Bytes: -1},
		{Ev: EvSend, From: "A", To: "B", Kind: "msg", About: "m1", ID: "m1"},
	}
	c := New(Options{Complete: true, Genuine: true})
	if err := c.Add(Record{Ev: EvMulticast, ID: "m0", Dst: []string{"A"}}); err != nil {
		t.Fatal(err)
	}
	before := c.Report()
	for _, r := range bad {
		if err := c.Add(r); !errors.Is(err, ErrMalformed) {
			t.Errorf("Add(%+v) = %v, want ErrMalformed", r, err)
		}
	}
	if diff := cmp.Diff(before, c.Report()); diff != "" {
		t.Errorf("malformed records changed the report (-before +after):\n%s", diff)
	}

	rep := Check(bad[:3], Options{})
	if got, want := rep.ViolationCounts[Malformed], 3; got != want {
		t.Errorf("Check counted %d malformed records, want %d", got, want)
	}
	if got, want := rep.Violations[1].Detail, `record 2: check: malformed record: unknown ev "flush"`; got != want {
		t.Errorf("detail = %q, want %q", got, want)
	}
}

func TestRecordsMax(t *testing.T) {
	c := New(Options{RecordsMax: 3})
	r := Record{Ev: EvSend, From: "A", To: "B", Kind: "msg", About: "m1"}
	for i := range 3 {
		if err := c.Add(r); err != nil {
			t.Fatalf("Add #%d: %v", i+1, err)
		}
	}
	if err := c.Add(r); !errors.Is(err, ErrLimit) {
		t.Fatalf("Add #4 = %v, want ErrLimit", err)
	}
	if got := c.Report().Sends; got != 3 {
		t.Errorf("sends = %d, want 3", got)
	}
}

// TestIncremental checks that Report can be called between Adds, that a
// deliver line is judged only at Report time, and that Report is repeatable.
func TestIncremental(t *testing.T) {
	c := New(Options{Complete: true})
	add := func(r Record) {
		t.Helper()
		if err := c.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	add(Record{Ev: EvDeliver, Group: "A", Replica: "r1", ID: "m1", Dst: []string{"A"}})
	first := c.Report()
	if got, want := first.ViolationCounts, map[string]int{Integrity: 1}; !cmp.Equal(got, want) {
		t.Errorf("before the multicast: counts %v, want %v", got, want)
	}
	if diff := cmp.Diff(first, c.Report()); diff != "" {
		t.Errorf("a second Report differs (-first +second):\n%s", diff)
	}
	add(Record{Ev: EvMulticast, ID: "m1", Dst: []string{"A"}})
	if rep := c.Report(); !rep.OK() {
		t.Errorf("after the multicast: %v, want ok", rep.Violations)
	}
}

// TestDatadriven renders the reports of testdata/*.txt; run with -rewrite
// after a deliberate change of wording.
func TestDatadriven(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "check" {
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			var opt Options
			for _, arg := range d.CmdArgs {
				switch arg.Key {
				case "complete":
					opt.Complete = true
				case "genuine":
					opt.Genuine = true
				default:
					d.Fatalf(t, "unknown argument %q", arg.Key)
				}
			}
			recs, err := parseScript(d.Input)
			if err != nil {
				d.Fatalf(t, "%v", err)
			}
			rep := Check(recs, opt)
			var b strings.Builder
			fmt.Fprintln(&b, rep.Summary())
			for _, v := range rep.Violations {
				fmt.Fprintln(&b, v)
			}
			return b.String()
		})
	})
}
