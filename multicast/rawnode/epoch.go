package rawnode

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Epochs and the stop-sign (DESIGN 14).
//
// The configuration in force has an epoch, 1 at bootstrap. A change is a
// control message (id multicast.ControlClient, sequence number the epoch e
// it ends) multicast to every group through the core like any message; its
// delivery at a group starts e+1 there. The node, not the core and not the
// application, tells it apart at delivery, by its id: it never reaches
// Output.Deliveries but Output.Changes, with its place among them.
//
// Every message carries the epoch its sender routed it with, in a header the
// node puts before the payload at the entry group and takes off at delivery
// (epochHeader), so that the cores and the application see the payload
// alone. The rules:
//
//   - An entry group takes a request of its own epoch only. An older one is
//     refused with ErrEpochChanged and the new epoch (EpochError): the
//     client refreshes its topology and resubmits, as a new request, since
//     the old one ran nowhere. A newer one (the client saw the change at
//     another group first) is refused with ErrEpochAhead, which wraps
//     multicast.ErrBusy: the client retries it as it is, and it waits for
//     the change at the entry group outside the group's state, bounded like
//     any other retried request.
//   - A message of an older epoch that is delivered after the change (where
//     the entry group does not deliver at once, as in Skeen) is delivered,
//     in its place, and listed in Output.Aborted: every destination
//     delivers it after the change (prefix order, the control message being
//     addressed to every group), so every destination aborts it alike.
//   - A message of a newer epoch is never delivered before the change at
//     any group: its entry group took it after delivering the change, and
//     the order of the core puts it after the change wherever both are
//     delivered (FlexCast's lca and the tree's inner groups deliver or
//     forward in their log order; Skeen's timestamps are above the
//     change's). The node asserts it.
//
// So at its delivery of the change a group holds no pending delivery of
// the ending epoch. The core is kept across a change that keeps the
// overlay (ranks and tree), and across every change under Skeen; a change
// of the overlay starts a new generation of the core (generation.go).

// Errors of the stop-sign. Test with errors.Is; errors.As with *EpochError
// gives the epochs.
var (
	// ErrEpochChanged: the request was routed with an epoch the group has
	// ended. The client fetches the topology and resubmits.
	ErrEpochChanged = errors.New("epoch changed")
	// ErrEpochAhead: the request was routed with an epoch the group has not
	// started yet. It wraps multicast.ErrBusy: retry it as it is.
	ErrEpochAhead = fmt.Errorf("%w: epoch not started here yet", multicast.ErrBusy)
	// ErrChangePending: a change of the epoch is under way: a second one is
	// refused, naming the epoch, until the first is delivered.
	ErrChangePending = errors.New("a change of the epoch is under way")
)

// EpochError is the error of a request refused for its epoch: Got is the
// epoch the request names, Epoch the group's.
type EpochError struct {
	Got, Epoch uint64
	Err        error // ErrEpochChanged, ErrEpochAhead or ErrChangePending
}

func (e *EpochError) Error() string {
	switch {
	case errors.Is(e.Err, ErrEpochChanged):
		return fmt.Sprintf("node: epoch changed: the request names epoch %d, the group is at epoch %d", e.Got, e.Epoch)
	case errors.Is(e.Err, ErrChangePending):
		return fmt.Sprintf("node: a change of epoch %d is under way: submit again at epoch %d", e.Epoch, e.Epoch+1)
	default:
		return fmt.Sprintf("node: %v: the request names epoch %d, the group is at epoch %d", e.Err, e.Got, e.Epoch)
	}
}

// Unwrap returns the sentinel.
func (e *EpochError) Unwrap() error { return e.Err }

// Change is a delivered control message: the end of epoch Epoch and the
// start of Epoch+1 with Config (the layer above encodes and checks it; the
// node carries it). At is its place in the output: the number of
// Output.Deliveries before it.
type Change struct {
	Epoch  uint64
	Config []byte
	At     int
}

// epochMagic starts the header of a message's payload: magic, then the
// epoch as a uvarint. A payload without it was ordered before epochs
// existed (a snapshot of an older version), hence in epoch 1: no
// application payload starts with this byte (txn payloads start with their
// kind, a small number).
const epochMagic byte = 0xfe

// ControlID returns the id of the control message that ends epoch e.
func ControlID(e uint64) multicast.MsgID {
	return multicast.MsgID{Client: multicast.ControlClient, Seq: e}
}

// Epoch returns the group's epoch: 1, plus one per change delivered.
func (n *Node) Epoch() uint64 { return n.epoch }

// Changing reports whether this group, as the entry of a change, took one
// that it has not delivered yet.
func (n *Node) Changing() bool { return n.changing }

// RequestAt steps a client request routed with epoch into the core, by the
// stop-sign rule (see above): refused with an *EpochError unless epoch is
// the group's; then as Request.
func (n *Node) RequestAt(m multicast.Message, epoch uint64) error {
	if m.ID.Reserved() {
		return fmt.Errorf("node: request %s: %w: client id %d is reserved", m.ID, multicast.ErrInvalid, m.ID.Client)
	}
	if epoch != n.epoch {
		err := ErrEpochChanged
		if epoch > n.epoch {
			err = ErrEpochAhead
		}
		return fmt.Errorf("node: request %s: %w", m.ID, &EpochError{Got: epoch, Epoch: n.epoch, Err: err})
	}
	return n.request(m, epoch)
}

// Change multicasts the control message that ends epoch e with the next
// configuration config, to every group of all, from this group: the caller
// sends every change of a cluster to one group (protocol.ChangeEntry), which
// orders a second change of an epoch after the first or refuses it. It is
// refused with an *EpochError when e is not the group's epoch
// (ErrEpochChanged, ErrEpochAhead) or when a change of e is under way
// (ErrChangePending), and like a request when the group is busy.
func (n *Node) Change(e uint64, all partition.GroupSet, config []byte) error {
	m := multicast.Message{ID: ControlID(e), Dst: all, Payload: config}
	switch {
	case e != n.epoch:
		err := ErrEpochChanged
		if e > n.epoch {
			err = ErrEpochAhead
		}
		return fmt.Errorf("node: change of epoch %d: %w", e, &EpochError{Got: e, Epoch: n.epoch, Err: err})
	case n.changing:
		return fmt.Errorf("node: change of epoch %d: %w", e, &EpochError{Got: e, Epoch: n.epoch, Err: ErrChangePending})
	}
	// A core that delivers at once (FlexCast's lca) ends the change in
	// the step itself.
	n.changing = true
	if err := n.request(m, e); err != nil {
		n.changing = false
		return err
	}
	return nil
}

// appendEpochHeader returns payload behind the header of epoch, in a new
// slice (the core keeps it).
func appendEpochHeader(epoch uint64, payload []byte) []byte {
	b := make([]byte, 0, 1+binary.MaxVarintLen64+len(payload))
	b = append(b, epochMagic)
	b = wire.AppendUvarint(b, epoch)
	return append(b, payload...)
}

// splitEpochHeader returns the epoch a delivered payload was routed with and
// the payload without its header. A payload without the header is of epoch
// 1 (see epochMagic); a malformed header is a core's bug.
func splitEpochHeader(id multicast.MsgID, b []byte) (uint64, []byte) {
	if len(b) == 0 || b[0] != epochMagic {
		return 1, b
	}
	d := wire.NewDecoder(b[1:])
	e := d.Uvarint()
	if d.Err() != nil || e == 0 {
		panic(fmt.Sprintf("node: message %s delivered with a malformed epoch header: %v", id, d.Err()))
	}
	return e, b[len(b)-d.Len():]
}

// deliver routes one delivery of the core by the stop-sign rule.
func (n *Node) deliver(m multicast.Message) {
	e, payload := splitEpochHeader(m.ID, m.Payload)
	m.Payload = payload
	if m.ID.IsControl() {
		// Control messages are taken at the entry group in epoch order
		// (Change) and delivered everywhere in that order (prefix order:
		// each is addressed to every group).
		if m.ID.Seq != n.epoch || e != n.epoch {
			panic(fmt.Sprintf("node: control message %s (epoch %d) delivered at epoch %d", m.ID, e, n.epoch))
		}
		c := Change{Epoch: n.epoch, Config: m.Payload, At: len(n.out.Deliveries)}
		n.out.Changes = append(n.out.Changes, c)
		n.epoch++
		n.changing = false
		n.rebuild(c)
		return
	}
	switch {
	case e > n.epoch:
		panic(fmt.Sprintf("node: message %s of epoch %d delivered at epoch %d, before the change", m.ID, e, n.epoch))
	case e < n.epoch:
		n.out.Aborted = append(n.out.Aborted, m.ID)
	}
	n.out.Deliveries = append(n.out.Deliveries, m)
}

// appendEpochs appends the node's epoch state to a snapshot.
func (n *Node) appendEpochs(b []byte) []byte {
	b = wire.AppendUvarint(b, n.epoch)
	c := uint64(0)
	if n.changing {
		c = 1
	}
	return wire.AppendUvarint(b, c)
}

// decodeEpochs reads what appendEpochs wrote.
func (n *Node) decodeEpochs(d *wire.Decoder) {
	n.epoch = d.Uvarint()
	c := d.Uvarint()
	if d.Err() == nil && (n.epoch == 0 || c > 1) {
		d.Fail("epoch %d, changing %d", n.epoch, c)
	}
	n.changing = c == 1
}
