package flexcast

import (
	"container/heap"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
)

// TestScenarios runs the scripts of testdata/scenarios: executions with a
// forced schedule over FIFO links, some of them slow, as in DESIGN 3.2.
//
//	run groups=A,B,C [slow=A->C,...] [off=history|acks|notifs|notifwait] [flush=N]
//	m1 A,C        <- multicast m1 to A and C at time 0
//	m3 B,C @5     <- at time 5
//
// A link takes 1 time unit, a slow link 100; every group steps its inputs
// in arrival order (ties by send order). The output lists each group's
// deliveries and the checker's verdict on the whole execution.
func TestScenarios(t *testing.T) {
	datadriven.RunTest(t, "testdata/scenarios", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "run" {
			t.Fatalf("%s: unknown command %q", d.Pos, d.Cmd)
		}
		sc := scenario{delay: map[[2]string]int64{}}
		for _, a := range d.CmdArgs {
			var vals []string
			for _, v := range a.Vals {
				vals = append(vals, strings.Split(v, ",")...)
			}
			a.Vals = vals
			switch a.Key {
			case "groups":
				sc.groups = a.Vals
			case "slow":
				for _, v := range a.Vals {
					from, to, ok := strings.Cut(v, "->")
					if !ok {
						t.Fatalf("%s: bad link %q", d.Pos, v)
					}
					sc.delay[[2]string{from, to}] = 100
				}
			case "off":
				for _, v := range a.Vals {
					switch v {
					case "history":
						sc.strategies.NoHistoryWait = true
					case "acks":
						sc.strategies.NoAcks = true
					case "notifs":
						sc.strategies.NoNotifs = true
					case "notifwait":
						sc.strategies.NoNotifWait = true
					default:
						t.Fatalf("%s: unknown strategy %q", d.Pos, v)
					}
				}
			case "flush":
				n, err := strconv.Atoi(a.Vals[0])
				if err != nil {
					t.Fatal(err)
				}
				sc.flushEvery = n
			default:
				t.Fatalf("%s: unknown argument %q", d.Pos, a.Key)
			}
		}
		for _, line := range strings.Split(strings.TrimSpace(d.Input), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				t.Fatalf("%s: bad message line %q", d.Pos, line)
			}
			m := scenarioMsg{name: f[0], dst: strings.Split(f[1], ",")}
			if len(f) > 2 {
				at, err := strconv.ParseInt(strings.TrimPrefix(f[2], "@"), 10, 64)
				if err != nil {
					t.Fatalf("%s: bad time %q", d.Pos, f[2])
				}
				m.at = at
			}
			sc.msgs = append(sc.msgs, m)
		}
		out, err := sc.run()
		if err != nil {
			t.Fatalf("%s: %v", d.Pos, err)
		}
		return out
	})
}

type scenarioMsg struct {
	name string
	dst  []string
	at   int64
}

type scenario struct {
	groups     []string
	delay      map[[2]string]int64
	strategies Strategies
	flushEvery int
	msgs       []scenarioMsg
}

type event struct {
	at, seq int64
	to      partition.GroupID
	in      multicast.Input
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	if q[i].at != q[j].at {
		return q[i].at < q[j].at
	}
	return q[i].seq < q[j].seq
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

func (sc *scenario) run() (string, error) {
	spec := partition.Spec{}
	for _, g := range sc.groups {
		spec.Groups = append(spec.Groups, partition.Group{Name: g})
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		return "", err
	}
	flushEvery := sc.flushEvery
	if flushEvery == 0 {
		flushEvery = -1
	}
	cores := make([]*Core, top.Len())
	for g := range cores {
		cores[g], err = New(Config{Self: partition.GroupID(g), Topology: top, Strategies: sc.strategies, FlushEvery: flushEvery, FlushTicks: -1})
		if err != nil {
			return "", err
		}
	}
	names := map[multicast.MsgID]string{}
	dstNames := func(s partition.GroupSet) []string {
		var out []string
		for _, g := range s.Slice() {
			out = append(out, top.Name(g))
		}
		return out
	}
	var q eventQueue
	var seq int64
	push := func(at int64, to partition.GroupID, in multicast.Input) {
		seq++
		heap.Push(&q, event{at: at, seq: seq, to: to, in: in})
	}
	chk := check.New(check.Options{Complete: true, Genuine: true})
	for i, m := range sc.msgs {
		var dst partition.GroupSet
		for _, name := range m.dst {
			g, ok := top.Lookup(name)
			if !ok {
				return "", fmt.Errorf("message %s: unknown group %q", m.name, name)
			}
			dst = dst.Add(g)
		}
		id := multicast.MsgID{Client: 1, Seq: uint64(i + 1)}
		names[id] = m.name
		msg := multicast.Message{ID: id, Dst: dst}
		if err := chk.Add(check.Record{Ev: "multicast", ID: m.name, Dst: dstNames(dst)}); err != nil {
			return "", err
		}
		push(m.at, Entry(dst), multicast.Request(msg))
	}
	name := func(id multicast.MsgID) string {
		if n, ok := names[id]; ok {
			return n
		}
		return id.String()
	}
	lastArrival := map[[2]partition.GroupID]int64{}
	delivered := make([][]string, top.Len())
	var sends [4]int
	for q.Len() > 0 {
		ev := heap.Pop(&q).(event)
		if err := cores[ev.to].Step(ev.in); err != nil {
			return "", fmt.Errorf("group %s at %d: %w", top.Name(ev.to), ev.at, err)
		}
		out := cores[ev.to].Ready()
		for _, m := range out.Deliveries {
			delivered[ev.to] = append(delivered[ev.to], name(m.ID))
			if err := chk.Add(check.Record{Ev: "deliver", Group: top.Name(ev.to), Replica: "r1", ID: name(m.ID), Dst: dstNames(m.Dst)}); err != nil {
				return "", err
			}
		}
		for _, s := range out.Sends {
			link := [2]partition.GroupID{ev.to, s.To}
			d := sc.delay[[2]string{top.Name(ev.to), top.Name(s.To)}]
			if d == 0 {
				d = 1
			}
			at := max(ev.at+d, lastArrival[link])
			lastArrival[link] = at
			push(at, s.To, multicast.Envelope(ev.to, s.Payload))
			if int(s.Kind) < len(sends) {
				sends[s.Kind]++
			}
			if err := chk.Add(check.Record{Ev: "send", From: top.Name(ev.to), To: top.Name(s.To), Kind: s.Kind.String(), About: name(s.About), Bytes: len(s.Payload)}); err != nil {
				return "", err
			}
		}
	}
	var b strings.Builder
	for g, ds := range delivered {
		fmt.Fprintf(&b, "%s: %s\n", top.Name(partition.GroupID(g)), strings.Join(ds, " "))
	}
	fmt.Fprintf(&b, "sends: msg=%d ack=%d notif=%d\n", sends[multicast.KindMsg], sends[multicast.KindAck], sends[multicast.KindNotif])
	rep := chk.Report()
	if rep.OK() {
		b.WriteString("check: ok\n")
	} else {
		props := map[string]bool{}
		for _, v := range rep.Violations {
			props[v.Property] = true
		}
		var ps []string
		for p := range props {
			ps = append(ps, p)
		}
		sort.Strings(ps)
		fmt.Fprintf(&b, "check: violated %s\n", strings.Join(ps, ", "))
	}
	return b.String(), nil
}
