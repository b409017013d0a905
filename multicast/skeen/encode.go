package skeen

import (
	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
)

// envelope is a decoded payload between groups.
type envelope struct {
	kind multicast.Kind // KindRelay or KindTS
	// msg is the relayed message; for a proposal, only its ID and Dst.
	msg multicast.Message
	ts  uint64 // KindTS: the proposed timestamp
}

// appendRelay appends the relay of m.
func appendRelay(b []byte, m multicast.Message) []byte {
	b = append(b, byte(multicast.KindRelay))
	return multicast.AppendMessage(b, m)
}

// appendProposal appends the proposal ts for message id to dst.
func appendProposal(b []byte, id multicast.MsgID, dst multicast.GroupSet, ts uint64) []byte {
	b = append(b, byte(multicast.KindTS))
	b = multicast.AppendMsgID(b, id)
	b = wire.AppendUvarint(b, uint64(dst))
	return wire.AppendUvarint(b, ts)
}

// append appends the encoding of e.
func (e envelope) append(b []byte) []byte {
	switch e.kind {
	case multicast.KindRelay:
		return appendRelay(b, e.msg)
	case multicast.KindTS:
		return appendProposal(b, e.msg.ID, e.msg.Dst, e.ts)
	default:
		panic("skeen: encoding an envelope of kind " + e.kind.String())
	}
}

// decode reads an envelope among groups 0..groups-1. It checks the form
// only: destination sets are non-empty and within range, nothing is left
// over. Whether the envelope makes sense at a group is Core's business. A
// relayed payload aliases b.
func decode(b []byte, groups int) (envelope, error) {
	d := wire.NewDecoder(b)
	var e envelope
	e.kind = multicast.Kind(d.Byte())
	switch e.kind {
	case multicast.KindRelay:
		e.msg = multicast.DecodeMessage(d, groups)
	case multicast.KindTS:
		e.msg.ID = multicast.DecodeMsgID(d)
		e.msg.Dst = d.GroupSet(groups)
		e.ts = d.Uvarint()
		if d.Err() == nil && e.msg.Dst.Empty() {
			d.Fail("proposal for %s has no destination", e.msg.ID)
		}
	default:
		d.Fail("envelope kind %s", e.kind)
	}
	if err := d.Finish(); err != nil {
		return envelope{}, err
	}
	return e, nil
}
