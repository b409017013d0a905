package channel

import (
	"fmt"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// frameVersion is the first byte of every encoded frame, so that the format
// can change without a receiver misreading an older or newer one.
const frameVersion = 1

// Frame is what travels on a link between two groups. Every frame carries
// the sender's cumulative acknowledgement for the reverse direction; a data
// frame (Seq > 0) also carries one envelope.
type Frame struct {
	From, To partition.GroupID
	// Seq > 0: a data frame carrying Payload, the Seq-th envelope From sent
	// To. Seq == 0: a control-only frame, with no payload.
	Seq uint64
	// Ack is a cumulative acknowledgement: From has applied every seq <= Ack
	// that To sent it.
	Ack uint64
	// Nack > 0 asks To to resend from this seq, which From is missing. From
	// has applied everything below it, so a nack always equals Ack+1.
	Nack    uint64
	Payload []byte
}

func (f Frame) String() string {
	return fmt.Sprintf("%d->%d seq %d ack %d nack %d (%d bytes)", f.From, f.To, f.Seq, f.Ack, f.Nack, len(f.Payload))
}

// AppendFrame appends the encoding of f to b. It encodes f as it is;
// DecodeFrame checks what it reads.
func AppendFrame(b []byte, f Frame) []byte {
	b = append(b, frameVersion)
	b = wire.AppendUvarint(b, uint64(f.From))
	b = wire.AppendUvarint(b, uint64(f.To))
	b = wire.AppendUvarint(b, f.Seq)
	b = wire.AppendUvarint(b, f.Ack)
	b = wire.AppendUvarint(b, f.Nack)
	return wire.AppendBytes(b, f.Payload)
}

// FrameSize returns the length of the encoding of f, len(AppendFrame(nil,
// f)), without encoding it.
func FrameSize(f Frame) int {
	return 1 + uvarintLen(uint64(f.From)) + uvarintLen(uint64(f.To)) + uvarintLen(f.Seq) +
		uvarintLen(f.Ack) + uvarintLen(f.Nack) + uvarintLen(uint64(len(f.Payload))) + len(f.Payload)
}

// uvarintLen returns the length of the uvarint encoding of v.
func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// DecodeFrame decodes a frame of a cluster of groups groups and checks its
// shape (groups in range, From != To, no payload on a control frame, a nack
// that follows its ack). Errors wrap multicast.ErrInvalid, and also
// wire.ErrCorrupt when the bytes are not an encoding at all. The payload
// aliases b; an empty payload decodes as nil. It never panics.
func DecodeFrame(b []byte, groups int) (Frame, error) {
	d := wire.NewDecoder(b)
	if v := d.Byte(); d.Err() == nil && v != frameVersion {
		d.Fail("frame version %d, want %d", v, frameVersion)
	}
	var f Frame
	f.From = d.Group(groups)
	f.To = d.Group(groups)
	f.Seq = d.Uvarint()
	f.Ack = d.Uvarint()
	f.Nack = d.Uvarint()
	f.Payload = d.Bytes()
	if err := d.Finish(); err != nil {
		return Frame{}, fmt.Errorf("channel: decode frame: %w: %w", multicast.ErrInvalid, err)
	}
	if len(f.Payload) == 0 {
		f.Payload = nil
	}
	if err := checkFrame(f, groups); err != nil {
		return Frame{}, err
	}
	return f, nil
}

// checkFrame checks what can be checked of f without a channel's state.
func checkFrame(f Frame, groups int) error {
	switch {
	case f.From < 0 || int(f.From) >= groups:
		return invalid(f, "sender out of range [0,%d)", groups)
	case f.To < 0 || int(f.To) >= groups:
		return invalid(f, "receiver out of range [0,%d)", groups)
	case f.From == f.To:
		return invalid(f, "sender and receiver are the same group")
	case f.Seq == 0 && len(f.Payload) != 0:
		return invalid(f, "control frame carries a payload")
	case f.Nack != 0 && f.Nack-1 != f.Ack:
		return invalid(f, "nack does not follow ack")
	}
	return nil
}

func invalid(f Frame, format string, args ...any) error {
	return fmt.Errorf("channel: frame %s: %s: %w", f, fmt.Sprintf(format, args...), multicast.ErrInvalid)
}
