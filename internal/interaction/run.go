package interaction

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/multicast/check"
	"github.com/flexkv/flexkv/partition"
)

// Run runs the datadriven scripts at path (a file or a directory of them)
// on the environment, with the protocols of protos (the new command picks
// one by name when there are several). Each script starts with new, and may
// start over with another new. Run with -rewrite to regenerate the expected
// outputs.
//
//	new groups=A,B,C|N [protocol=P] [parent=B:A,...] [resend-ticks=K]
//	    [holdback-max=K] [outbox-max=K] [protocol options...]
//	                                 a cluster: groups by rank (N: A, B, ...),
//	                                 a tree by child:parent pairs
//	link from=G,... to=H,... delay=D  frames on these links take D (default 1)
//	hold from=G,... to=H,...          step and stabilize leave their frames
//	release from=G,... to=H,...       undo hold
//	multicast id=X dst=G,... [entry=G] [time=T]
//	                                 a client request at its entry group: at
//	                                 once, or scheduled at time T
//	deliver from=G to=H [count=K] [skip=S]
//	                                 apply the link's frames, after S others
//	drop from=G to=H [count=K] [skip=S]
//	                                 lose them
//	dup from=G to=H                  send the link's first frame again
//	step [count=K]                   apply the next K events in time order
//	stabilize [trace]                step until only held frames are left
//	tick [count=K] [group=G,...]     tick the nodes (default: all)
//	links                            the frames in flight, per link
//	deliveries                       every group's delivery order
//	sends kinds=msg,ack,...          the core sends counted by kind
//	check [complete] [genuine]       multicast/check over the whole run
//	stats group=G                    the core's counters (Protocol.Stats)
//	channel group=G                  the node's channel counters
//	snapshot-restore group=G         replace G by a copy restored from its
//	                                 snapshots (core and node)
//
// Commands that apply inputs print what they made the groups do: "A->B kind
// id" per send, "B delivers id" per delivery, refusals and rejections.
func Run(t *testing.T, path string, protos ...Protocol) {
	t.Helper()
	datadriven.Walk(t, path, func(t *testing.T, path string) {
		var e *Env
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd == "new" {
				var err error
				if e, err = newFromArgs(d, protos); err != nil {
					d.Fatalf(t, "%v", err)
				}
				return ""
			}
			if e == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var b strings.Builder
			if err := e.command(d, &b); err != nil {
				d.Fatalf(t, "%v", err)
			}
			return b.String()
		})
	})
}

func newFromArgs(d *datadriven.TestData, protos []Protocol) (*Env, error) {
	var spec partition.Spec
	chcfg := channel.Config{ResendTicks: ResendTicksDefault, HoldbackMax: HoldbackMaxDefault, OutboxMax: OutboxMaxDefault}
	var rest Args
	var proto *Protocol
	if len(protos) == 1 {
		proto = &protos[0]
	}
	for _, a := range d.CmdArgs {
		vals := splitVals(a)
		switch a.Key {
		case "groups":
			if n, err := strconv.Atoi(single(a)); err == nil && len(vals) == 1 {
				if n < 1 || n > len(groupLetters) {
					return nil, fmt.Errorf("groups=%d out of range", n)
				}
				vals = strings.Split(groupLetters[:n], "")
			}
			for _, v := range vals {
				spec.Groups = append(spec.Groups, partition.Group{Name: v})
			}
		case "parent":
			spec.Parent = map[string]string{}
			for _, v := range vals {
				child, parent, ok := strings.Cut(v, ":")
				if !ok {
					return nil, fmt.Errorf("parent %q: want child:parent", v)
				}
				spec.Parent[child] = parent
			}
		case "protocol":
			proto = nil
			for i := range protos {
				if protos[i].Name == single(a) {
					proto = &protos[i]
				}
			}
			if proto == nil {
				return nil, fmt.Errorf("unknown protocol %q", single(a))
			}
		case "resend-ticks", "holdback-max", "outbox-max":
			n, err := strconv.Atoi(single(a))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.Key, err)
			}
			switch a.Key {
			case "resend-ticks":
				chcfg.ResendTicks = n
			case "holdback-max":
				chcfg.HoldbackMax = n
			default:
				chcfg.OutboxMax = n
			}
		default:
			rest = append(rest, a)
		}
	}
	if proto == nil {
		return nil, fmt.Errorf("new: protocol= required")
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		return nil, err
	}
	return NewEnv(*proto, top, rest, chcfg)
}

// splitVals returns a's values, with comma-separated lists split.
func splitVals(a datadriven.CmdArg) []string {
	var out []string
	for _, v := range a.Vals {
		out = append(out, strings.Split(v, ",")...)
	}
	return out
}

func (e *Env) command(d *datadriven.TestData, b *strings.Builder) error {
	intArg := func(key string, def int) (int, error) {
		a, ok := d.Arg(key)
		if !ok {
			return def, nil
		}
		return strconv.Atoi(single(a))
	}
	switch d.Cmd {
	case "link", "hold", "release":
		from, err := e.groupsArg(d, "from")
		if err != nil {
			return err
		}
		to, err := e.groupsArg(d, "to")
		if err != nil {
			return err
		}
		delay, err := intArg("delay", 1)
		if err != nil {
			return err
		}
		for _, f := range from.Slice() {
			for _, t := range to.Remove(f).Slice() {
				switch d.Cmd {
				case "link":
					e.SetDelay(f, t, int64(delay))
				default:
					e.SetHeld(f, t, d.Cmd == "hold")
				}
			}
		}
		return nil
	case "multicast":
		a, ok := d.Arg("id")
		if !ok {
			return fmt.Errorf("multicast: id= required")
		}
		name := single(a)
		id, err := e.ID(name)
		if err != nil {
			return err
		}
		dst, err := e.groupsArg(d, "dst")
		if err != nil {
			return err
		}
		entry := e.Entry(dst)
		if d.HasArg("entry") {
			gs, err := e.groupsArg(d, "entry")
			if err != nil {
				return err
			}
			entry = gs.Min()
		}
		m := multicast.Message{ID: id, Dst: dst, Payload: []byte(name)}
		if !d.HasArg("time") {
			e.trace = b
			defer func() { e.trace = nil }()
			return e.request(entry, m)
		}
		at, err := intArg("time", 0)
		if err != nil {
			return err
		}
		e.queue.Push(max(int64(at), e.now), event{kind: evRequest, to: entry, msg: m})
		return nil
	case "deliver", "drop":
		from, to, err := e.linkArgs(d)
		if err != nil {
			return err
		}
		count, err := intArg("count", 1)
		if err != nil {
			return err
		}
		skip, err := intArg("skip", 0)
		if err != nil {
			return err
		}
		e.trace = b
		defer func() { e.trace = nil }()
		for range count {
			if d.Cmd == "deliver" {
				err = e.Deliver(from, to, skip)
			} else {
				var f channel.Frame
				if f, err = e.Drop(from, to, skip); err == nil {
					fmt.Fprintf(b, "dropped %s->%s %s\n", e.top.Name(from), e.top.Name(to), e.describeFrame(f))
				}
			}
			if err != nil {
				return err
			}
		}
		return nil
	case "dup":
		from, to, err := e.linkArgs(d)
		if err != nil {
			return err
		}
		f, err := e.Duplicate(from, to)
		if err == nil {
			fmt.Fprintf(b, "duplicated %s->%s %s\n", e.top.Name(from), e.top.Name(to), e.describeFrame(f))
		}
		return err
	case "step":
		count, err := intArg("count", 1)
		if err != nil {
			return err
		}
		e.trace = b
		defer func() { e.trace = nil }()
		for range count {
			ok, err := e.Step()
			if err != nil {
				return err
			}
			if !ok {
				b.WriteString("nothing to step\n")
				break
			}
		}
		return nil
	case "stabilize":
		if d.HasArg("trace") {
			e.trace = b
			defer func() { e.trace = nil }()
		}
		if err := e.Stabilize(); err != nil {
			return err
		}
		if !d.HasArg("trace") {
			b.WriteString("ok\n")
		}
		return nil
	case "tick":
		count, err := intArg("count", 1)
		if err != nil {
			return err
		}
		gs := e.top.All()
		if d.HasArg("group") {
			if gs, err = e.groupsArg(d, "group"); err != nil {
				return err
			}
		}
		e.trace = b
		defer func() { e.trace = nil }()
		for range count {
			if err := e.Tick(gs); err != nil {
				return err
			}
		}
		return nil
	case "links":
		keys, frames := e.links()
		for _, k := range keys {
			var shown []string
			for _, f := range frames[k] {
				shown = append(shown, e.describeFrame(f))
			}
			held := ""
			if e.held[k[0]][k[1]] {
				held = " (held)"
			}
			fmt.Fprintf(b, "%s->%s%s: %s\n", e.top.Name(k[0]), e.top.Name(k[1]), held, strings.Join(shown, ", "))
		}
		return nil
	case "deliveries":
		for g, order := range e.orders {
			fmt.Fprintf(b, "%s:", e.top.Name(partition.GroupID(g)))
			for _, n := range order {
				fmt.Fprintf(b, " %s", n)
			}
			b.WriteByte('\n')
		}
		return nil
	case "sends":
		a, ok := d.Arg("kinds")
		if !ok {
			return fmt.Errorf("sends: kinds= required")
		}
		var parts []string
		for _, name := range splitVals(a) {
			k, err := multicast.ParseKind(name)
			if err != nil {
				return err
			}
			parts = append(parts, fmt.Sprintf("%s=%d", name, e.kinds[k]))
		}
		fmt.Fprintf(b, "%s\n", strings.Join(parts, " "))
		return nil
	case "check":
		rep := e.Check(check.Options{Complete: d.HasArg("complete"), Genuine: d.HasArg("genuine")})
		writeReport(b, rep)
		return nil
	case "stats":
		if e.proto.Stats == nil {
			return fmt.Errorf("stats: the protocol shows no stats")
		}
		g, err := e.groupArg(d)
		if err != nil {
			return err
		}
		fmt.Fprintf(b, "%s\n", e.proto.Stats(e.cores[g]))
		return nil
	case "channel":
		g, err := e.groupArg(d)
		if err != nil {
			return err
		}
		s := e.nodes[g].Stats()
		fmt.Fprintf(b, "%+v rejected=%d\n", s.Channel, s.EnvelopesRejected)
		return nil
	case "snapshot-restore":
		g, err := e.groupArg(d)
		if err != nil {
			return err
		}
		if err := e.SnapshotRestore(g); err != nil {
			return err
		}
		fmt.Fprintf(b, "%s restored; its snapshots encode again to the same bytes\n", e.top.Name(g))
		return nil
	default:
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
}

// writeReport shows a check: ok, or the violated properties on one line and
// then each violation the report describes.
func writeReport(b *strings.Builder, rep check.Report) {
	if rep.OK() {
		b.WriteString("ok\n")
		return
	}
	var props []string
	for _, p := range check.Properties {
		if rep.ViolationCounts[p] > 0 {
			props = append(props, p)
		}
	}
	fmt.Fprintf(b, "violated %s\n", strings.Join(props, ", "))
	for _, v := range rep.Violations {
		fmt.Fprintf(b, "  %s\n", v)
	}
}

// single returns a's value; an argument given as a list keeps its first.
func single(a datadriven.CmdArg) string {
	if len(a.Vals) == 0 {
		return ""
	}
	return a.Vals[0]
}

func (e *Env) groupsArg(d *datadriven.TestData, key string) (partition.GroupSet, error) {
	a, ok := d.Arg(key)
	if !ok {
		return 0, fmt.Errorf("%s: %s= required", d.Cmd, key)
	}
	var s partition.GroupSet
	for _, name := range splitVals(a) {
		g, ok := e.top.Lookup(name)
		if !ok {
			return 0, fmt.Errorf("%s: unknown group %q", d.Cmd, name)
		}
		s = s.Add(g)
	}
	return s, nil
}

func (e *Env) groupArg(d *datadriven.TestData) (partition.GroupID, error) {
	s, err := e.groupsArg(d, "group")
	if err != nil {
		return 0, err
	}
	if s.Len() != 1 {
		return 0, fmt.Errorf("%s: want one group", d.Cmd)
	}
	return s.Min(), nil
}

func (e *Env) linkArgs(d *datadriven.TestData) (from, to partition.GroupID, err error) {
	f, err := e.groupsArg(d, "from")
	if err != nil {
		return 0, 0, err
	}
	t, err := e.groupsArg(d, "to")
	if err != nil {
		return 0, 0, err
	}
	if f.Len() != 1 || t.Len() != 1 {
		return 0, 0, fmt.Errorf("%s: want one link", d.Cmd)
	}
	return f.Min(), t.Min(), nil
}
