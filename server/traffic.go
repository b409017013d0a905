package server

import (
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Traffic is what a replica counted since its server opened: the envelopes
// its group sent to other groups while this replica led it (the protocols'
// own flush traffic included: it is part of what a protocol costs), their
// payload bytes, and the messages it delivered (flushes excluded). The
// gTPC-C driver reports it per node (DESIGN 9: messages and bytes per node
// per second).
//
// For a group's overhead (DESIGN 3.4: 1 - delivered/received payload
// messages), Requests counts the client requests its group accepted and
// PayloadTo, by group name, the sends carrying a message's payload (msg,
// relay) to each group while this replica led: what a group receives is
// its requests plus the payload sends to it, summed over every replica of
// every group. A send is counted by the replica that believed it led when
// it applied the entry: across a leader change, a new leader that applies
// entries its predecessor applied as leader counts their sends again, so
// the figures are exact for runs without failover (the driver's).
type Traffic struct {
	Sends     uint64
	SendBytes uint64
	// BytesByKind splits SendBytes by send kind ("msg", "ack", "notif",
	// "ts", "relay", "vote"; "flush" for every send about a flush), the
	// names of the flexkv_send_bytes_total metric's kind label. Kinds
	// that sent nothing are absent.
	BytesByKind map[string]uint64
	Deliveries  uint64
	Requests    uint64
	PayloadTo   map[string]uint64
	// Steps and StepNanos count the client requests this replica proposed
	// and then delivered (an entry group that is a destination) and the
	// time from proposing each to delivering it, as the
	// flexkv_delivery_seconds histogram measures it: one step of the
	// latency model (package overlay's CommitMs) where the protocol
	// delivers at the entry group at once (protocol.DeliversAtEntry).
	Steps     uint64
	StepNanos uint64
}

// Traffic returns the server's counts.
func (s *Server) Traffic() Traffic {
	var t Traffic
	for k := range s.counts.sends {
		t.Sends += s.counts.sends[k].Load()
		b := s.counts.sendBytes[k].Load()
		t.SendBytes += b
		if b == 0 {
			continue
		}
		if t.BytesByKind == nil {
			t.BytesByKind = make(map[string]uint64)
		}
		t.BytesByKind[sendKindLabel(multicast.Kind(k))] += b
	}
	t.Deliveries = s.counts.deliveriesLocal.Load() + s.counts.deliveriesGlobal.Load()
	t.Requests = s.counts.accepted.Load()
	n, sum := s.counts.delivery.total()
	t.Steps, t.StepNanos = n, uint64(sum)
	for g := range s.counts.payloadTo {
		if n := s.counts.payloadTo[g].Load(); n > 0 {
			if t.PayloadTo == nil {
				t.PayloadTo = make(map[string]uint64)
			}
			t.PayloadTo[s.top.Name(partition.GroupID(g))] = n
		}
	}
	return t
}
