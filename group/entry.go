package group

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/flexkv/flexkv/internal/invariants"
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

// The kinds of log entries.
const (
	entryRequest byte = 1 // a client request: the message (its id is the client id and sequence number)
	entryInbound byte = 2 // a batch of frames from another group, in the order they arrived
	entryTick    byte = 3 // a logical tick proposed by the leader: the group's log time
	entrySession byte = 4 // a client opens a session (session.go); its id comes from the entry's index
	// entryRequests carries client requests, each applied in turn as its
	// own request entry would be: the leader proposes in one entry the
	// requests that arrive while it writes the previous one.
	entryRequests byte = 5
	// entryRequestsAt carries client requests and the epoch their client
	// routed them with (DESIGN 14; epoch.go); entryRequest and
	// entryRequests are of epoch 1.
	entryRequestsAt byte = 6
	// entryChange ends an epoch and names the next one's configuration
	// (epoch.go).
	entryChange byte = 7
	// entryChangeMembers is entryChange with the next epoch's members
	// (epoch.go); entryChange keeps the current ones.
	entryChangeMembers byte = 8
	// entryRequestsFrom is entryRequestsAt with each request's client home
	// group, which the entry group counts with its destinations
	// (counts.go).
	entryRequestsFrom byte = 9
	// entryMoveChunk carries a chunk of a partition moving to the group
	// (moves.go).
	entryMoveChunk byte = 10
)

// Bounds of a log entry.
const (
	// InboundFramesMax and InboundBytesMax bound one inbound batch: its
	// frames and their encoded bytes.
	InboundFramesMax = 4096
	InboundBytesMax  = 1 << 20
	// MessagePayloadMax bounds the payload of a client request. A message
	// travels in envelopes (with the protocol's own data: FlexCast's
	// history, Skeen's timestamps) in frames of at most InboundBytesMax: a
	// payload the channel could not carry would stay at the head of its
	// FIFO queue for ever, and block everything behind it.
	MessagePayloadMax = InboundBytesMax / 2
)

// ErrDuplicate says that a request with this id (or a later one of its
// session) was accepted before: it is not applied again.
var ErrDuplicate = errors.New("group: duplicate request")

// EncodeRequest returns the log entry of a client request.
func EncodeRequest(m multicast.Message) []byte {
	b := multicast.AppendMessage([]byte{entryRequest}, m)
	if invariants.Enabled {
		checkRequestsEntry(b, []multicast.Message{m})
	}
	return b
}

// RequestsMax and RequestsBytesMax bound the requests of one entry
// (EncodeRequests): their number, and the bytes of their encoded messages,
// which one message may exceed alone.
const (
	RequestsMax      = 256
	RequestsBytesMax = InboundBytesMax
)

// EncodeRequests returns the log entry of client requests, applied in
// order, each as the entry of EncodeRequest would be; the entry's outcome
// is a RequestErrors. It holds at most RequestsMax requests.
func EncodeRequests(ms []multicast.Message) []byte {
	b := wire.AppendUvarint([]byte{entryRequests}, uint64(len(ms)))
	for _, m := range ms {
		b = multicast.AppendMessage(b, m)
	}
	if invariants.Enabled {
		checkRequestsEntry(b, ms)
	}
	return b
}

// RequestErrors is the outcome of an entry of several requests
// (EncodeRequests): that of each request, in order, as State.Apply gives it
// for a single request (nil: accepted). It matches with errors.Is and
// errors.As any error of a request.
type RequestErrors []error

func (e RequestErrors) Error() string {
	n := 0
	var first error
	for _, err := range e {
		if err != nil {
			if n == 0 {
				first = err
			}
			n++
		}
	}
	if n == 0 {
		return fmt.Sprintf("group: %d requests accepted", len(e))
	}
	return fmt.Sprintf("group: %d of %d requests not accepted, the first: %v", n, len(e), first)
}

// Unwrap returns the errors of the requests.
func (e RequestErrors) Unwrap() []error { return e }

// EncodeInbound returns the log entry of frames received from group from.
func EncodeInbound(from partition.GroupID, frames []channel.Frame) []byte {
	b := []byte{entryInbound}
	b = wire.AppendUvarint(b, uint64(from))
	b = wire.AppendUvarint(b, uint64(len(frames)))
	var fb []byte
	for _, f := range frames {
		fb = channel.AppendFrame(fb[:0], f)
		b = wire.AppendBytes(b, fb)
	}
	if invariants.Enabled {
		checkInboundEntry(b, from, frames)
	}
	return b
}

// EncodeTick returns the log entry of a tick.
func EncodeTick() []byte { return []byte{entryTick} }

// EncodeSession returns the log entry that opens a client session. The
// session's id is SessionID(group, the entry's index).
func EncodeSession() []byte { return []byte{entrySession} }

// checkRequestsEntry asserts that the entry b of one request
// (EncodeRequest) or several (EncodeRequests) reads back as ms, in the
// layout State.Apply reads. It reads the messages as they were encoded,
// without judging them: a request Apply refuses round-trips too.
func checkRequestsEntry(b []byte, ms []multicast.Message) {
	if len(b) == 0 || (b[0] != entryRequest && b[0] != entryRequests) {
		invariants.Violated("group: requests entry of kind %v", b[:min(len(b), 1)])
	}
	d := wire.NewDecoder(b[1:])
	n := uint64(1)
	if b[0] == entryRequests {
		n = d.Uvarint()
	}
	if n != uint64(len(ms)) {
		invariants.Violated("group: entry of %d requests reads back %d", len(ms), n)
	}
	for i, m := range ms {
		id := multicast.DecodeMsgID(d)
		dst := partition.GroupSet(d.Uvarint())
		payload := d.Bytes()
		if id != m.ID || dst != m.Dst || !bytes.Equal(payload, m.Payload) {
			invariants.Violated("group: request %d of an entry, %s to %s (%d bytes), reads back as %s to %s (%d bytes): %v",
				i, m.ID, m.Dst, len(m.Payload), id, dst, len(payload), d.Err())
		}
	}
	if err := d.Finish(); err != nil {
		invariants.Violated("group: entry of %d requests does not read back: %v", len(ms), err)
	}
}

// checkInboundEntry asserts that the inbound entry b reads back as the
// frames from group from, and that each frame takes the bytes
// channel.FrameSize says, by which the shell sizes a batch within
// InboundBytesMax. A frame DecodeFrame refuses (Apply then refuses the
// entry) is compared by its bytes only.
func checkInboundEntry(b []byte, from partition.GroupID, frames []channel.Frame) {
	d := wire.NewDecoder(b[1:])
	if got, n := d.Uvarint(), d.Uvarint(); b[0] != entryInbound || got != uint64(from) || n != uint64(len(frames)) {
		invariants.Violated("group: inbound entry of %d frames from %d reads back as kind %d, %d frames from %d", len(frames), from, b[0], n, got)
	}
	for i, f := range frames {
		fb := d.Bytes()
		if len(fb) != channel.FrameSize(f) {
			invariants.Violated("group: inbound frame %d (%s) takes %d bytes, FrameSize says %d", i, f, len(fb), channel.FrameSize(f))
		}
		got, err := channel.DecodeFrame(fb, partition.GroupsMax)
		if err == nil && (got.From != f.From || got.To != f.To || got.Seq != f.Seq || got.Ack != f.Ack || got.Nack != f.Nack || !bytes.Equal(got.Payload, f.Payload)) {
			invariants.Violated("group: inbound frame %d (%s) reads back as %s", i, f, got)
		}
	}
	if err := d.Finish(); err != nil {
		invariants.Violated("group: inbound entry of %d frames does not read back: %v", len(frames), err)
	}
}
