package txn

import (
	"fmt"
	"sync"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Stored procedures (DESIGN 6): deterministic Go code registered by name
// on every replica, called with arguments that only the procedure reads.
// A call is multicast like a transaction, to the owners of the keys it
// touches, and every destination runs the procedure's piece for its own
// keys.
//
// Each destination of a call runs its own piece. By default the pieces
// take no votes: a piece runs as soon as it reaches the head of its group's
// execution queue, so a decision that must be the same at every
// destination (to abort the call) must depend only on the arguments and
// replicated keys, and a piece that aborts for its own data (a missing
// row, a key its group does not hold, too many writes, a panic) aborts
// alone. A procedure that implements AllOrNothing and returns true makes
// its calls all or nothing (DESIGN 6): each destination of a call to
// several groups whose piece can abort runs it once as a trial at the head
// of its queue and sends the outcome to the other destinations as its
// vote; every destination commits only if no piece aborted, and otherwise
// aborts with the reason of the first destination, in rank order, whose
// piece aborted. The price is a vote's trip between groups before any
// destination answers, with the queue behind the call held back from what
// its trial touched meanwhile.
//
// Which pieces can abort is the procedure's to say (PieceVotes): by
// default every piece of an all-or-nothing call can, and votes. A piece
// that cannot abort sends no vote, and waits only for the votes of the
// pieces that can; a call none of whose pieces can abort takes no vote at
// all and costs what a call that is not all or nothing does. "Cannot
// abort" means: the piece aborts, if ever, only when every piece of the
// call aborts alike, on a decision taken from the arguments and replicated
// keys alone (every destination reads the same copies at the call's point
// of the delivery order). The executor enforces, either way, that a piece
// that reads or writes a key its group does not hold aborts.

// KeysMax bounds the keys a procedure call may touch.
const KeysMax = 4096

// ProcWritesMax bounds the keys one piece of a procedure may write; more
// abort the piece.
const ProcWritesMax = 1024

// Procedure is a stored procedure. Its methods must be deterministic (no
// clock, no randomness, no map order, no state outside their arguments) and
// must not panic, whatever the arguments: they run in every replica's apply
// loop.
type Procedure interface {
	// Keys returns every key a call with args may touch, for routing: the
	// call's destinations are the owners of these keys, as for a Txn
	// (keys of replicated partitions add none; a call that touches only
	// replicated keys goes to one group, the client's home group). At
	// most KeysMax keys. An error makes the call invalid.
	Keys(args []byte) ([][]byte, error)
	// Run runs the piece of group p.Group. It reads through p.Reader and
	// writes through p.Writer, which hold its writes back until it
	// returns. It returns the piece's result: Succeeded and the Results
	// to report (Index ascending). An error, or a result with Aborted
	// set, aborts the piece: its writes are dropped and the error's text
	// (or Reason) is reported. Run must not keep p or anything it
	// returned after it returns.
	Run(p *ProcPiece) (PieceResult, error)
}

// AllOrNothing is implemented by a Procedure whose calls commit at every
// destination or at none (see above).
type AllOrNothing interface {
	AllOrNothing() bool
}

// IsAllOrNothing reports whether p's calls are all or nothing.
func IsAllOrNothing(p Procedure) bool {
	a, ok := p.(AllOrNothing)
	return ok && a.AllOrNothing()
}

// ReadOnly is implemented by a Procedure whose pieces never write: a call
// of it to one group may run at that group's leader on the applied state
// instead of through the log (DESIGN 6.5). A piece that writes all the same
// is not answered there: the call goes through the log.
type ReadOnly interface {
	ReadOnly() bool
}

// IsReadOnly reports whether p's calls write nothing.
func IsReadOnly(p Procedure) bool {
	r, ok := p.(ReadOnly)
	return ok && r.ReadOnly()
}

// CallPiece is one piece of a call as PieceVotes sees it: before it runs,
// at any destination of the call, for any destination's piece.
type CallPiece struct {
	Group partition.GroupID  // the group whose piece it is
	Dst   partition.GroupSet // the call's destinations, with Group
	Args  []byte             // the call's arguments; read only
	// Partitions is the partition map every replica of every group
	// shares.
	Partitions *partition.PartitionMap
}

// Owns reports whether c.Group owns key (replicated keys excluded).
func (c *CallPiece) Owns(key []byte) bool {
	g, replicated, err := c.Partitions.Owner(key)
	return err == nil && !replicated && g == c.Group
}

// PieceVotes is implemented by an all-or-nothing procedure that knows which
// pieces of a call can abort (see above). Only those vote; the others
// send no vote and wait only for theirs.
type PieceVotes interface {
	// CanAbort reports whether piece c of a call can abort other than
	// as every piece of the call does. It must be deterministic and must
	// not panic, and must depend on c alone: every destination asks it
	// about every destination's piece, when the call is delivered and
	// again after a restart, and all must get the same answers. It has
	// no state to read, and needs none: it is asked when the call is
	// delivered, before the deliveries ahead of it have run, and a
	// decision taken on replicated keys is one that every piece takes
	// alike in Run, which needs no vote. Answering
	// false for a piece that then aborts on its own makes that piece
	// abort alone, as if the call were not all or nothing.
	CanAbort(c *CallPiece) bool
}

// PieceCanAbort reports whether piece c of a call of the all-or-nothing
// procedure p can abort: p's CanAbort, or true if p does not implement
// PieceVotes or its CanAbort panics (which every replica sees alike).
func PieceCanAbort(p Procedure, c *CallPiece) (can bool) {
	v, ok := p.(PieceVotes)
	if !ok {
		return true
	}
	defer func() {
		if recover() != nil {
			can = true
		}
	}()
	return v.CanAbort(c)
}

// ProcPiece is what a procedure's Run gets: one group's piece of one call.
type ProcPiece struct {
	ID    multicast.MsgID    // the call's transaction id
	Group partition.GroupID  // the group running the piece
	Dst   partition.GroupSet // the call's destinations
	Args  []byte             // the call's arguments; read only
	// Reader reads the keys Group owns and the replicated keys, seeing
	// the piece's own writes; reading any other key aborts the piece.
	Reader Reader
	// Writer writes keys Group owns; any other key aborts the piece, as do
	// more than ProcWritesMax keys, or a value over kv.ValueMax bytes. Put
	// copies key and value: the procedure may reuse its buffers after it.
	// The executor's Writer is also an OwnedWriter.
	Writer Writer
	// Owns reports whether Group owns key (replicated keys excluded).
	Owns func(key []byte) bool
}

// OwnedWriter is a ProcPiece's Writer that can keep what it is given:
// PutOwned writes as Put does, but holds key and value as they are, where
// Put copies them. The procedure must never change them afterwards: it is
// for a value just encoded and a key just built, which nothing else holds.
type OwnedWriter interface {
	PutOwned(key, value []byte) error
}

// Registry maps procedure names to procedures. Every replica of every
// group must register the same procedures under the same names: a call to
// a name a replica does not know aborts there. It is safe for concurrent
// use.
type Registry struct {
	mu    sync.RWMutex
	procs map[string]Procedure
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{procs: map[string]Procedure{}} }

// Register registers p under name, a string of 1..ProcNameMax bytes of
// [a-z0-9_.-]. A name registered before is an error.
func (r *Registry) Register(name string, p Procedure) error {
	if err := checkProcName(name); err != nil {
		return err
	}
	if p == nil {
		return fmt.Errorf("txn: register %q: nil procedure", name)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.procs[name]; dup {
		return fmt.Errorf("txn: procedure %q registered twice", name)
	}
	r.procs[name] = p
	return nil
}

// Lookup returns the procedure registered under name.
func (r *Registry) Lookup(name string) (Procedure, bool) {
	if r == nil {
		return nil, false
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	p, ok := r.procs[name]
	return p, ok
}

// Destinations returns the groups call c must be multicast to: the owners
// of the keys its procedure touches, or home when they are all replicated.
// Errors match ErrInvalid: an invalid call, an unknown procedure, keys the
// procedure refuses or that are not in the partition map.
func (r *Registry) Destinations(c Call, pm *partition.PartitionMap, top *partition.Topology, home partition.GroupID) (partition.GroupSet, error) {
	dst, err := r.destinations(c, pm, top)
	if err != nil {
		return 0, err
	}
	if dst.Empty() {
		if !top.Valid(home) {
			return 0, invalidf("txn: home group %d is not a group of the topology (0..%d)", home, top.Len()-1)
		}
		dst = partition.SetOf(home)
	}
	return dst, nil
}

// Keys returns the keys call c's procedure names for its arguments: those
// that route it.
func (r *Registry) Keys(c Call) ([][]byte, error) {
	if err := c.check(); err != nil {
		return nil, err
	}
	p, ok := r.Lookup(c.Name)
	if !ok {
		return nil, invalidf("txn: unknown procedure %q", c.Name)
	}
	keys, err := p.Keys(c.Args)
	if err != nil {
		return nil, invalidf("txn: call %q: keys: %w", c.Name, err)
	}
	return keys, nil
}

// destinations returns the owners of the keys of c, possibly none.
func (r *Registry) destinations(c Call, pm *partition.PartitionMap, top *partition.Topology) (partition.GroupSet, error) {
	if pm == nil || top == nil {
		return 0, fmt.Errorf("txn: routing call %q without a partition map or topology", c.Name)
	}
	keys, err := r.Keys(c)
	if err != nil {
		return 0, err
	}
	if len(keys) > KeysMax {
		return 0, invalidf("txn: call %q touches %d keys, more than KeysMax (%d)", c.Name, len(keys), KeysMax)
	}
	dst, err := pm.Destinations(keys)
	if err != nil {
		return 0, invalidf("txn: call %q: %w", c.Name, err)
	}
	if !top.ValidSet(dst) {
		return 0, fmt.Errorf("txn: partition map names groups %s outside the topology (0..%d)", dst, top.Len()-1)
	}
	return dst, nil
}

// CheckCallDestinations checks that dst is a destination set the call may
// have been multicast to: its owners, or one group of the topology when it
// touches only replicated keys.
func (r *Registry) CheckCallDestinations(c Call, pm *partition.PartitionMap, top *partition.Topology, dst partition.GroupSet) error {
	want, err := r.destinations(c, pm, top)
	if err != nil {
		return err
	}
	switch {
	case want.Empty():
		if dst.Len() != 1 || !top.ValidSet(dst) {
			return fmt.Errorf("txn: destination set %s: a call that touches only replicated keys has one destination of the topology (0..%d)",
				dst, top.Len()-1)
		}
	case dst != want:
		return fmt.Errorf("txn: destination set %s, want %s", dst, want)
	}
	return nil
}
