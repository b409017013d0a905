package interaction

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
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

// handler runs one command of a script on e and writes what it shows to b.
type handler func(e *Env, d *datadriven.TestData, b *strings.Builder) error

// handlers are the commands a script may give after new, one handler each
// in its own file (handler_<command>.go); commands that differ in one word
// (hold and release, deliver and drop) share theirs.
var handlers = map[string]handler{
	"link":             handleLink,
	"hold":             handleLink,
	"release":          handleLink,
	"multicast":        handleMulticast,
	"deliver":          handleDeliver,
	"drop":             handleDeliver,
	"dup":              handleDup,
	"step":             handleStep,
	"stabilize":        handleStabilize,
	"tick":             handleTick,
	"links":            handleLinks,
	"deliveries":       handleDeliveries,
	"sends":            handleSends,
	"check":            handleCheck,
	"stats":            handleStats,
	"channel":          handleChannel,
	"snapshot-restore": handleSnapshotRestore,
}

// command runs the command d on e.
func (e *Env) command(d *datadriven.TestData, b *strings.Builder) error {
	h, ok := handlers[d.Cmd]
	if !ok {
		return fmt.Errorf("unknown command %q", d.Cmd)
	}
	return h(e, d, b)
}

// traceTo shows what the groups do on b until the function it returns is
// called: handlers that apply inputs defer it.
func (e *Env) traceTo(b *strings.Builder) func() {
	e.trace = b
	return func() { e.trace = nil }
}
