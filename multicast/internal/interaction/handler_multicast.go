package interaction

import (
	"fmt"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast"
)

// handleMulticast makes a client request at its entry group (the
// protocol's, unless entry= names one), at once or scheduled at time T; the
// payload is the message's name:
//
//	multicast id=X dst=G,... [entry=G] [time=T]
func handleMulticast(e *Env, d *datadriven.TestData, b *strings.Builder) error {
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
		defer e.traceTo(b)()
		return e.request(entry, m)
	}
	at, err := intArg(d, "time", 0)
	if err != nil {
		return err
	}
	e.queue.Push(max(int64(at), e.now), event{kind: evRequest, to: entry, msg: m})
	return nil
}
