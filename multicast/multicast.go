// Package multicast holds the contract shared by FlexKV's atomic multicast
// protocols and the reliable channel layer beneath them.
//
// Every protocol core (flexcast, skeen, tree) is a deterministic state machine,
// one instance per group, in the style of etcd's raft RawNode: it reads no
// clock, draws no random numbers, starts no goroutine and does no I/O. Its
// inputs are client requests, envelopes from other groups and logical ticks;
// Step validates an input and then mutates the state; Ready drains the
// resulting sends and deliveries. The same inputs in the same order produce
// the same outputs and the same state on every replica.
//
// A core may assume that envelopes from another group arrive exactly once and
// in FIFO order per sending group: package channel provides that on top of a
// network that loses, duplicates and reorders.
package multicast

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/flexkv/flexkv/partition"
)

// GroupID is partition.GroupID, re-exported for brevity.
type GroupID = partition.GroupID

// GroupSet is partition.GroupSet, re-exported for brevity.
type GroupSet = partition.GroupSet

// FlushClient is the client id reserved for messages that a protocol core
// originates itself (FlexCast's garbage-collection flush). They are never
// handed to the application.
const FlushClient = math.MaxUint64

// ControlClient is the client id reserved for control messages (DESIGN 14):
// a change of the cluster multicast to every group, whose delivery ends an
// epoch. The control message that ends epoch e has sequence number e, so
// that there is one per epoch. The node (package multicast/rawnode) takes
// them apart from the application's messages; clients may not use the id.
const ControlClient = math.MaxUint64 - 1

// MsgID identifies a message: the client that sent it and the client's
// sequence number. It is comparable and cheap to hash.
type MsgID struct {
	Client uint64
	Seq    uint64
}

// IsFlush reports whether id names a protocol-internal flush message.
func (id MsgID) IsFlush() bool { return id.Client == FlushClient }

// IsControl reports whether id names a control message (ControlClient).
func (id MsgID) IsControl() bool { return id.Client == ControlClient }

// Reserved reports whether id uses a client id no client may use: a flush
// or a control message.
func (id MsgID) Reserved() bool { return id.IsFlush() || id.IsControl() }

// String formats id as the delivery log writes it: "c3.17", "flush.5", or
// "epoch.2" (the control message that ends epoch 2).
func (id MsgID) String() string {
	if id.IsFlush() {
		return "flush." + strconv.FormatUint(id.Seq, 10)
	}
	if id.IsControl() {
		return "epoch." + strconv.FormatUint(id.Seq, 10)
	}
	return "c" + strconv.FormatUint(id.Client, 10) + "." + strconv.FormatUint(id.Seq, 10)
}

// ParseMsgID parses the output of MsgID.String.
func ParseMsgID(s string) (MsgID, error) {
	if rest, ok := strings.CutPrefix(s, "flush."); ok {
		seq, err := strconv.ParseUint(rest, 10, 64)
		if err != nil {
			return MsgID{}, fmt.Errorf("multicast: bad message id %q", s)
		}
		return MsgID{Client: FlushClient, Seq: seq}, nil
	}
	if rest, ok := strings.CutPrefix(s, "epoch."); ok {
		seq, err := strconv.ParseUint(rest, 10, 64)
		if err != nil || seq == 0 {
			return MsgID{}, fmt.Errorf("multicast: bad message id %q", s)
		}
		return MsgID{Client: ControlClient, Seq: seq}, nil
	}
	rest, ok := strings.CutPrefix(s, "c")
	if !ok {
		return MsgID{}, fmt.Errorf("multicast: bad message id %q (want c<client>.<seq>)", s)
	}
	c, q, ok := strings.Cut(rest, ".")
	if !ok {
		return MsgID{}, fmt.Errorf("multicast: bad message id %q (want c<client>.<seq>)", s)
	}
	client, err1 := strconv.ParseUint(c, 10, 64)
	seq, err2 := strconv.ParseUint(q, 10, 64)
	if err1 != nil || err2 != nil || client == FlushClient || client == ControlClient {
		return MsgID{}, fmt.Errorf("multicast: bad message id %q", s)
	}
	return MsgID{Client: client, Seq: seq}, nil
}

// Less orders ids by client, then sequence number.
func (id MsgID) Less(o MsgID) bool {
	if id.Client != o.Client {
		return id.Client < o.Client
	}
	return id.Seq < o.Seq
}

// Message is what a client multicasts: an id, a non-empty destination set
// and an opaque payload (a transaction, in FlexKV).
type Message struct {
	ID      MsgID
	Dst     GroupSet
	Payload []byte
}

// Kind classifies a send between groups, as the delivery log names it.
type Kind uint8

// The kinds of sends. KindVote carries transaction votes (package txn); the
// ordering protocols use the others.
const (
	KindMsg   Kind = iota + 1 // a message's payload
	KindAck                   // FlexCast acknowledgement
	KindNotif                 // FlexCast notification
	KindTS                    // Skeen timestamp proposal
	KindRelay                 // eager relay of a message to its other destinations
	KindVote                  // transaction vote
)

var kindNames = [...]string{KindMsg: "msg", KindAck: "ack", KindNotif: "notif", KindTS: "ts", KindRelay: "relay", KindVote: "vote"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// ParseKind parses the output of Kind.String.
func ParseKind(s string) (Kind, error) {
	for k, name := range kindNames {
		if name != "" && name == s {
			return Kind(k), nil
		}
	}
	return 0, fmt.Errorf("multicast: unknown send kind %q", s)
}

// Send is an envelope that a core asks to be carried to another group.
// Payload is the core's own encoding; Kind and About describe it for logs
// and metrics.
type Send struct {
	To      GroupID
	Kind    Kind
	About   MsgID
	Payload []byte
	// Background marks the core's own bookkeeping, which no work waits
	// for (FlexCast's garbage collection): the channel carries it as
	// reliably, but leaves it out of back-pressure
	// (channel.SendBackground).
	Background bool
}

// Timed is implemented by a core that acts on ticks alone (a timeout, a
// periodic flush). TimerRunning reports whether a tick could make it act
// now or later without any other input; a core that does not implement
// Timed never acts on a tick alone, and its group may stop ticking while
// nothing else happens.
type Timed interface {
	TimerRunning() bool
}

// InputKind says which field of an Input is set.
type InputKind uint8

// The kinds of inputs of a core.
const (
	InputRequest  InputKind = iota + 1 // Msg: a client's request, at the entry group
	InputEnvelope                      // From, Payload: an envelope from another group
	InputTick                          // a logical clock tick
)

// Input is exactly one of: a client request, an envelope from a group, a tick.
type Input struct {
	Kind    InputKind
	Msg     Message // InputRequest
	From    GroupID // InputEnvelope
	Payload []byte  // InputEnvelope
}

// Request returns the input of a client request for m.
func Request(m Message) Input { return Input{Kind: InputRequest, Msg: m} }

// Envelope returns the input of an envelope from another group.
func Envelope(from GroupID, payload []byte) Input {
	return Input{Kind: InputEnvelope, From: from, Payload: payload}
}

// Tick returns the input of one logical tick.
func Tick() Input { return Input{Kind: InputTick} }

// Output is what Ready drains: sends to other groups and deliveries, in the
// group's delivery order. The caller owns the slices.
type Output struct {
	Sends      []Send
	Deliveries []Message
}

// Empty reports whether o holds nothing.
func (o Output) Empty() bool { return len(o.Sends) == 0 && len(o.Deliveries) == 0 }

// Core is the contract of every ordering protocol (DESIGN 3.1).
//
// Step validates in and returns an error, leaving the state untouched, when in
// is malformed or not acceptable now (ErrBusy); otherwise it applies in. Ready
// returns and forgets what the steps so far produced. Deliveries hold
// application messages only. Neither method may be called concurrently.
type Core interface {
	Step(in Input) error
	Ready() Output
}

// Errors shared by the cores. Wrap them with %w and test with errors.Is.
var (
	// ErrBusy: a bound is reached; the client should retry later.
	ErrBusy = errors.New("multicast: busy")
	// ErrNotEntry: the request reached a group that is not its entry group.
	ErrNotEntry = errors.New("multicast: not the entry group")
	// ErrInvalid: the input is malformed.
	ErrInvalid = errors.New("multicast: invalid input")
)

// Protocol names an ordering protocol, as configurations, flags and reports
// spell it. The registry in package multicast/protocol lists the protocols
// and says everything else about them (DESIGN 1).
type Protocol string

// ValidateRequest checks a client request against the topology: a known,
// non-empty destination set and an application (non-flush) id.
func ValidateRequest(top *partition.Topology, m Message) error {
	if m.Dst.Empty() {
		return fmt.Errorf("%w: message %s has no destination", ErrInvalid, m.ID)
	}
	if !top.ValidSet(m.Dst) {
		return fmt.Errorf("%w: message %s names unknown groups %s", ErrInvalid, m.ID, m.Dst&^top.All())
	}
	if m.ID.IsFlush() {
		return fmt.Errorf("%w: client id %d is reserved", ErrInvalid, m.ID.Client)
	}
	return nil
}
