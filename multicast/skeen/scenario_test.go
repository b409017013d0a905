package skeen

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// TestScenarios runs the scripts of testdata/: groups are named A, B, C...
// by rank, every link is a FIFO queue, and the script says which link moves.
// Proposals print as clock.group: 3.B is 3*n + rank(B).
//
//	init groups=N [pending-max=K]
//	request at=G id=cX.Y dst=G,H,...   step a client request at G
//	recv from=G to=H [count=K]          move K envelopes (default 1) from G to H
//	drain                               move envelopes until every link is empty
//	links                               list the envelopes in flight
//	stats at=G                          print G's Stats
//	deliveries                          print every group's delivery order
//	check [complete]                    verify the orders (DESIGN 3.1)
//
// Run with -rewrite to regenerate the expected outputs.
func TestScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata", func(t *testing.T, path string) {
		var cl *cluster
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if cl == nil && d.Cmd != "init" {
				d.Fatalf(t, "%s before init", d.Cmd)
			}
			var b strings.Builder
			switch d.Cmd {
			case "init":
				var n int
				pendingMax := 0
				d.ScanArgs(t, "groups", &n)
				d.MaybeScanArgs(t, "pending-max", &pendingMax)
				cl = newCluster(t, n, pendingMax)
				return ""
			case "request":
				var at, id, dst string
				d.ScanArgs(t, "at", &at)
				d.ScanArgs(t, "id", &id)
				d.ScanArgs(t, "dst", &dst)
				m := multicast.Message{ID: parseID(t, d, id), Dst: parseSet(t, d, cl, dst), Payload: []byte(id)}
				sends, dels, err := cl.request(group(t, d, cl, at), m)
				if err != nil {
					return "error: " + err.Error() + "\n"
				}
				cl.printOutput(&b, group(t, d, cl, at), sends, dels)
			case "recv":
				var from, to string
				count := 1
				d.ScanArgs(t, "from", &from)
				d.ScanArgs(t, "to", &to)
				d.MaybeScanArgs(t, "count", &count)
				f, g := group(t, d, cl, from), group(t, d, cl, to)
				for range count {
					sends, dels := cl.recv(f, g)
					cl.printOutput(&b, g, sends, dels)
				}
			case "drain":
				cl.drain()
				return "ok\n"
			case "links":
				for _, l := range cl.busy() {
					fmt.Fprintf(&b, "%s->%s:", cl.top.Name(l[0]), cl.top.Name(l[1]))
					for _, s := range cl.links[l[0]][l[1]] {
						fmt.Fprintf(&b, " %s", cl.describe(s))
					}
					b.WriteByte('\n')
				}
			case "stats":
				var at string
				d.ScanArgs(t, "at", &at)
				s := cl.cores[group(t, d, cl, at)].Stats()
				fmt.Fprintf(&b, "pending=%d undecided=%d decided=%d buffered=%d peak=%d delivered=%d clock=%d\n",
					s.Pending, s.Undecided, s.Decided, s.Buffered, s.PendingPeak, s.Delivered, s.Clock)
			case "deliveries":
				for g := range cl.orders {
					fmt.Fprintf(&b, "%s:", cl.top.Name(partition.GroupID(g)))
					for _, id := range cl.orderIDs(partition.GroupID(g)) {
						fmt.Fprintf(&b, " %s", id)
					}
					b.WriteByte('\n')
				}
			case "check":
				if err := cl.verify(d.HasArg("complete")); err != nil {
					return "violation: " + err.Error() + "\n"
				}
				return "ok\n"
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			return b.String()
		})
	})
}

// printOutput writes what group g sent and delivered in one step.
func (cl *cluster) printOutput(b *strings.Builder, g partition.GroupID, sends []multicast.Send, dels []multicast.Message) {
	for _, s := range sends {
		fmt.Fprintf(b, "%s->%s %s\n", cl.top.Name(g), cl.top.Name(s.To), cl.describe(s))
	}
	for _, m := range dels {
		fmt.Fprintf(b, "%s delivers %s\n", cl.top.Name(g), m.ID)
	}
}

// describe prints a send as "relay c1.1" or "ts c1.1 2.B".
func (cl *cluster) describe(s multicast.Send) string {
	env, err := decode(s.Payload, cl.top.Len())
	if err != nil {
		cl.t.Fatalf("undecodable send %+v: %v", s, err)
	}
	if env.kind != s.Kind || env.msg.ID != s.About {
		cl.t.Fatalf("send labelled %s %s carries %s %s", s.Kind, s.About, env.kind, env.msg.ID)
	}
	if env.kind == multicast.KindTS {
		return fmt.Sprintf("ts %s %s", s.About, cl.stamp(env.ts))
	}
	return fmt.Sprintf("%s %s", s.Kind, s.About)
}

func (cl *cluster) stamp(ts uint64) string {
	n := uint64(cl.top.Len())
	return fmt.Sprintf("%d.%s", ts/n, cl.top.Name(partition.GroupID(ts%n)))
}

func group(t *testing.T, d *datadriven.TestData, cl *cluster, name string) partition.GroupID {
	g, ok := cl.top.Lookup(name)
	if !ok {
		d.Fatalf(t, "no group %q", name)
	}
	return g
}

func parseSet(t *testing.T, d *datadriven.TestData, cl *cluster, names string) partition.GroupSet {
	var s partition.GroupSet
	for _, name := range strings.Split(names, ",") {
		s = s.Add(group(t, d, cl, name))
	}
	return s
}

func parseID(t *testing.T, d *datadriven.TestData, s string) multicast.MsgID {
	id, err := multicast.ParseMsgID(s)
	if err != nil {
		d.Fatalf(t, "%v", err)
	}
	return id
}
