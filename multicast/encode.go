package multicast

import (
	"encoding/binary"

	"github.com/flexkv/flexkv/internal/wire"
)

// AppendMsgID appends id, deterministically: client, then seq, as varints.
func AppendMsgID(b []byte, id MsgID) []byte {
	b = binary.AppendUvarint(b, id.Client)
	return binary.AppendUvarint(b, id.Seq)
}

// AppendMessage appends m: its id, its destination set and its payload
// (length-prefixed).
func AppendMessage(b []byte, m Message) []byte {
	b = AppendMsgID(b, m.ID)
	b = binary.AppendUvarint(b, uint64(m.Dst))
	return wire.AppendBytes(b, m.Payload)
}

// DecodeMsgID reads what AppendMsgID wrote.
func DecodeMsgID(d *wire.Decoder) MsgID {
	c := d.Uvarint()
	s := d.Uvarint()
	return MsgID{Client: c, Seq: s}
}

// DecodeMessage reads what AppendMessage wrote, for a message whose
// destinations are below n; it fails d if the destination set is empty.
// The payload aliases d's input.
func DecodeMessage(d *wire.Decoder, n int) Message {
	var m Message
	m.ID = DecodeMsgID(d)
	m.Dst = d.GroupSet(n)
	m.Payload = d.Bytes()
	if d.Err() == nil && m.Dst.Empty() {
		d.Fail("message %s has no destination", m.ID)
	}
	return m
}
