package group

import (
	"errors"
	"fmt"

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
	return wire.AppendMessage([]byte{entryRequest}, m)
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
		b = wire.AppendMessage(b, m)
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
	return b
}

// EncodeTick returns the log entry of a tick.
func EncodeTick() []byte { return []byte{entryTick} }

// EncodeSession returns the log entry that opens a client session. The
// session's id is SessionID(group, the entry's index).
func EncodeSession() []byte { return []byte{entrySession} }
