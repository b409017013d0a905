package group

import (
	"errors"
	"fmt"
	"slices"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/multicast/rawnode"
	"github.com/flexkv/flexkv/partition"
)

// Epochs in the replicated state (DESIGN 14). The node (rawnode, epoch.go)
// orders the changes and applies the stop-sign; the state keeps the
// configuration of every epoch, from the bootstrap configuration (epoch 1),
// in its snapshots, and checks a change before the node multicasts it.
//
// A change is a log entry of the group that takes every change
// (protocol.ChangeEntry): EncodeChange(e, next) ends epoch e and starts
// e+1 with next. Every group learns it at its delivery of the control
// message, and adds next to its table then.
//
// A change may alter the overlay (the ranks and the tree): under FlexCast
// and the tree protocol the node then starts a new generation of the core
// at the cut (rawnode, generation.go), which Begin builds on the groups
// ranked by the new overlay; Skeen keeps its core. A change of a group's
// members (DESIGN 14, Members) keeps the core: every group, and every
// client, learns the new addresses at the cut.

// EpochConfig is the configuration of one epoch: the overlay (the groups,
// lowest rank first) and the tree (each group's parent, partition.NoGroup
// for the root; nil without a tree).
type EpochConfig struct {
	Epoch   uint64
	Overlay []partition.GroupID
	Parent  []partition.GroupID
	// Members are the replicas of every group, by GroupID, with their
	// addresses; nil: the bootstrap configuration's (no member changed
	// since epoch 1). The state does not know the bootstrap addresses: the
	// server does. A change that sets them sets every group's (CheckMembers).
	Members [][]partition.ReplicaConfig
	// Owners is the owner of every partition, by its index in the
	// cluster's partition map (key order; partition.NoGroup for a
	// replicated one); nil: the bootstrap configuration's (no partition
	// moved since epoch 1). Moves are the partitions on their way to
	// another group in this epoch (moves.go); they need Owners.
	Owners []partition.GroupID
	Moves  []Move
}

// Bounds of an epoch's members: replicas per group, and the bytes of an id
// or an address.
const (
	MembersMax      = partition.EpochReplicasMax
	MemberFieldsMax = 256
)

// CheckMembers checks the members of an epoch over n groups: every group
// has 1 to MembersMax replicas, each with an id, a raft and a gRPC address;
// ids are unique in the cluster, and no two replicas share an address
// (raft, gRPC, peer, HTTP).
func CheckMembers(members [][]partition.ReplicaConfig, n int) error {
	if len(members) != n {
		return fmt.Errorf("members of %d groups, want %d", len(members), n)
	}
	ids := make(map[string]int)
	addrs := make(map[string]string)
	for g, rs := range members {
		if len(rs) == 0 || len(rs) > MembersMax {
			return fmt.Errorf("group %d has %d members, want 1 to %d", g, len(rs), MembersMax)
		}
		for _, r := range rs {
			if r.ID == "" || r.Raft == "" || r.GRPC == "" {
				return fmt.Errorf("group %d: member %q lacks an id, a raft or a grpc address", g, r.ID)
			}
			if was, dup := ids[r.ID]; dup {
				return fmt.Errorf("member id %q twice (groups %d and %d)", r.ID, was, g)
			}
			ids[r.ID] = g
			for _, a := range []string{r.Raft, r.GRPC, r.PeerAddr(), r.HTTP} {
				if a == "" {
					continue
				}
				// One replica may serve two of its own services on one
				// address; two replicas never share one.
				if who, dup := addrs[a]; dup && who != r.ID {
					return fmt.Errorf("address %s of member %q is %s's too", a, r.ID, who)
				}
				addrs[a] = r.ID
			}
		}
	}
	return nil
}

// EpochsKept bounds the configurations a state keeps: the latest ones.
const EpochsKept = 256

// BootstrapEpoch returns epoch 1 of topology top: the configuration it was
// built from.
func BootstrapEpoch(top *partition.Topology) EpochConfig {
	c := EpochConfig{Epoch: 1, Overlay: make([]partition.GroupID, top.Len())}
	for g := range top.Len() {
		c.Overlay[g] = partition.GroupID(g)
	}
	if top.HasTree() {
		c.Parent = make([]partition.GroupID, top.Len())
		for g := range top.Len() {
			c.Parent[g] = top.Parent(partition.GroupID(g))
		}
	}
	return c
}

// GroupMembers returns the members of group g in c, and false when c keeps
// the bootstrap configuration's (Members nil).
func (c EpochConfig) GroupMembers(g partition.GroupID) ([]partition.ReplicaConfig, bool) {
	if c.Members == nil || int(g) >= len(c.Members) {
		return nil, false
	}
	return c.Members[g], true
}

// SameOverlay reports whether c and o have the same ranks and tree.
func (c EpochConfig) SameOverlay(o EpochConfig) bool {
	return slices.Equal(c.Overlay, o.Overlay) && slices.Equal(c.Parent, o.Parent)
}

// appendEpochConfig appends c's overlay, tree, members and owners (its
// epoch is the caller's).
func appendEpochConfig(b []byte, c EpochConfig) []byte {
	b = appendOverlay(b, c)
	b = appendMembers(b, c.Members, c.Owners != nil)
	if c.Owners != nil {
		b = appendOwners(b, c)
	}
	return b
}

// The flags before an epoch's members: the members follow (else the
// bootstrap configuration's), the owners follow (moves.go). A
// configuration written before moves has no owners flag.
const (
	flagMembers = 1
	flagOwners  = 2
)

// appendMembers appends a table of members: its flags (flagMembers unless
// members is nil: the bootstrap configuration's; flagOwners if owners
// follow), then every group's.
func appendMembers(b []byte, members [][]partition.ReplicaConfig, owners bool) []byte {
	var flags uint64
	if members != nil {
		flags |= flagMembers
	}
	if owners {
		flags |= flagOwners
	}
	b = wire.AppendUvarint(b, flags)
	for _, rs := range members {
		b = wire.AppendUvarint(b, uint64(len(rs)))
		for _, r := range rs {
			for _, f := range []string{r.ID, r.Raft, r.GRPC, r.Peer, r.HTTP} {
				b = wire.AppendBytes(b, []byte(f))
			}
		}
	}
	return b
}

// decodeMembers reads what appendMembers wrote, for n groups, and checks
// it (CheckMembers); owners reports whether the owners follow.
func decodeMembers(d *wire.Decoder, n int) (members [][]partition.ReplicaConfig, owners bool) {
	flags := d.Uvarint()
	if flags > flagMembers|flagOwners {
		d.Fail("members flags %d, want 0 to 3", flags)
		return nil, false
	}
	owners = flags&flagOwners != 0
	if flags&flagMembers == 0 {
		return nil, owners
	}
	out := make([][]partition.ReplicaConfig, n)
	for g := range n {
		k := d.Count(5)
		if k > MembersMax {
			d.Fail("group %d: %d members, at most %d", g, k, MembersMax)
		}
		for range k {
			var f [5]string
			for i := range f {
				v := d.Bytes()
				if len(v) > MemberFieldsMax {
					d.Fail("member field of %d bytes, at most %d", len(v), MemberFieldsMax)
				}
				f[i] = string(v)
			}
			if d.Err() != nil {
				return nil, false
			}
			out[g] = append(out[g], partition.ReplicaConfig{ID: f[0], Raft: f[1], GRPC: f[2], Peer: f[3], HTTP: f[4]})
		}
	}
	if d.Err() != nil {
		return nil, false
	}
	if err := CheckMembers(out, n); err != nil {
		d.Fail("%v", err)
		return nil, false
	}
	return out, owners
}

// cloneMembers returns a deep copy of a table of members.
func cloneMembers(m [][]partition.ReplicaConfig) [][]partition.ReplicaConfig {
	if m == nil {
		return nil
	}
	out := make([][]partition.ReplicaConfig, len(m))
	for g, rs := range m {
		out[g] = slices.Clone(rs)
	}
	return out
}

// appendOverlay appends c's overlay and tree.
func appendOverlay(b []byte, c EpochConfig) []byte {
	b = wire.AppendUvarint(b, uint64(len(c.Overlay)))
	for _, g := range c.Overlay {
		b = wire.AppendUvarint(b, uint64(g))
	}
	b = wire.AppendUvarint(b, uint64(len(c.Parent)))
	for _, g := range c.Parent {
		b = wire.AppendUvarint(b, uint64(g+1)) // NoGroup (-1) as 0
	}
	return b
}

// decodeEpochConfig reads what appendEpochConfig wrote, for n groups, and
// checks it: the overlay lists every group once; the tree, if any, gives
// every group a parent or none (whether it is a tree is checked when a
// change is taken, checkChange); the members pass CheckMembers.
func decodeEpochConfig(d *wire.Decoder, n int) EpochConfig {
	c := decodeOverlay(d, n)
	if d.Err() != nil {
		return c
	}
	var owners bool
	c.Members, owners = decodeMembers(d, n)
	if owners && d.Err() == nil {
		decodeOwners(d, n, &c)
	}
	return c
}

// decodeOverlay reads what appendOverlay wrote, for n groups.
func decodeOverlay(d *wire.Decoder, n int) EpochConfig {
	var c EpochConfig
	if k := d.Count(1); k != n && d.Err() == nil {
		d.Fail("overlay of %d groups, want %d", k, n)
	}
	var seen partition.GroupSet
	for range n {
		g := d.Group(n)
		if d.Err() != nil {
			return c
		}
		if seen.Has(g) {
			d.Fail("group %d twice in the overlay", g)
			return c
		}
		seen = seen.Add(g)
		c.Overlay = append(c.Overlay, g)
	}
	k := d.Count(1)
	if k != 0 && k != n && d.Err() == nil {
		d.Fail("tree of %d groups, want 0 or %d", k, n)
	}
	for range k {
		p := d.Uvarint()
		if d.Err() == nil && p > uint64(n) {
			d.Fail("parent %d of %d groups", p-1, n)
		}
		c.Parent = append(c.Parent, partition.GroupID(p)-1)
	}
	return c
}

// EncodeChange returns the log entry that ends epoch e and starts e+1 with
// next (next.Epoch is ignored), its members included. Only the group that
// takes every change (protocol.ChangeEntry) accepts it.
func EncodeChange(e uint64, next EpochConfig) []byte {
	b := wire.AppendUvarint([]byte{entryChangeMembers}, e)
	return appendEpochConfig(b, next)
}

// controlMembers starts the payload of a control message that carries its
// epoch's members (appendEpochConfig). A payload of a change written before
// members (overlay and tree alone) starts with the number of groups, never
// 0: its epoch keeps the members of the epoch before.
const controlMembers byte = 0

// EncodeRequestsAt returns the log entry of client requests routed with
// epoch, applied in order, each as the entry of EncodeRequests would be; its
// outcome is a RequestErrors. The entries of EncodeRequest and
// EncodeRequests, written before epochs existed, are of epoch 1.
func EncodeRequestsAt(epoch uint64, ms []multicast.Message) []byte {
	b := wire.AppendUvarint([]byte{entryRequestsAt}, epoch)
	b = wire.AppendUvarint(b, uint64(len(ms)))
	for _, m := range ms {
		b = multicast.AppendMessage(b, m)
	}
	return b
}

// ErrChangeRefused wraps the reasons a change is refused for what it asks.
var ErrChangeRefused = errors.New("group: change refused")

// Epoch returns the group's epoch.
func (s *State) Epoch() uint64 { return s.node.Epoch() }

// Epochs returns the configurations the state keeps, oldest first: every
// epoch's, up to EpochsKept. The caller must not modify them.
func (s *State) Epochs() []EpochConfig { return s.epochs }

// EpochConfig returns the configuration of the group's epoch.
func (s *State) EpochConfig() EpochConfig { return s.epochs[len(s.epochs)-1] }

// EncodeRequestsFrom is EncodeRequestsAt with the home group of each
// request's client (homes[i] for ms[i]; partition.NoGroup: none), which
// the entry group counts with the request's destinations (counts.go).
func EncodeRequestsFrom(epoch uint64, ms []multicast.Message, homes []partition.GroupID) []byte {
	if len(homes) != len(ms) {
		panic(fmt.Sprintf("group: %d homes for %d requests", len(homes), len(ms)))
	}
	b := wire.AppendUvarint([]byte{entryRequestsFrom}, epoch)
	b = wire.AppendUvarint(b, uint64(len(ms)))
	for i, m := range ms {
		b = multicast.AppendMessage(b, m)
		b = wire.AppendUvarint(b, uint64(homes[i]+1))
	}
	return b
}

// applyRequestsAt applies an entry of EncodeRequestsAt.
func (s *State) applyRequestsAt(index uint64, d *wire.Decoder) error {
	return s.applyRequests(index, d.Uvarint(), d)
}

// applyRequestsFrom applies an entry of EncodeRequestsFrom.
func (s *State) applyRequestsFrom(index uint64, d *wire.Decoder) error {
	epoch := d.Uvarint()
	n := d.Count(2)
	if n > RequestsMax {
		d.Fail("%d requests, at most %d", n, RequestsMax)
	}
	groups := s.cfg.Topology.Len()
	ms := make([]multicast.Message, 0, n)
	homes := make([]partition.GroupID, 0, n)
	for range n {
		m := multicast.DecodeMessage(d, groups)
		h := d.Uvarint()
		if d.Err() != nil {
			break
		}
		if h > uint64(groups) {
			d.Fail("home group %d of %d groups", int64(h)-1, groups)
			break
		}
		ms = append(ms, m)
		homes = append(homes, partition.GroupID(h)-1)
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("%w: group: requests entry %d: %w", multicast.ErrInvalid, index, err)
	}
	errs := make(RequestErrors, len(ms))
	for i, m := range ms {
		errs[i] = s.requestFrom(m, epoch, homes[i])
	}
	return errs
}

// applyRequests applies the requests of an entry, from their count on,
// each routed at epoch (an entry of EncodeRequests: 1).
func (s *State) applyRequests(index, epoch uint64, d *wire.Decoder) error {
	n := d.Count(1)
	if n > RequestsMax {
		d.Fail("%d requests, at most %d", n, RequestsMax)
	}
	ms := make([]multicast.Message, 0, n)
	for range n {
		if m := multicast.DecodeMessage(d, s.cfg.Topology.Len()); d.Err() == nil {
			ms = append(ms, m)
		}
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("%w: group: requests entry %d: %w", multicast.ErrInvalid, index, err)
	}
	errs := make(RequestErrors, len(ms))
	for i, m := range ms {
		errs[i] = s.request(m, epoch)
	}
	return errs
}

// applyChange applies an entry of EncodeChange (withMembers), or of the
// entry written before members, whose epoch keeps the current members:
// checked (checkChange), then multicast by the node, which refuses it for
// its epoch.
func (s *State) applyChange(index uint64, d *wire.Decoder, withMembers bool) error {
	e := d.Uvarint()
	var next EpochConfig
	if withMembers {
		next = decodeEpochConfig(d, s.cfg.Topology.Len())
	} else {
		next = decodeOverlay(d, s.cfg.Topology.Len())
		next.keepFrom(s.EpochConfig())
	}
	if err := d.Finish(); err != nil {
		return fmt.Errorf("%w: group: change entry %d: %w", multicast.ErrInvalid, index, err)
	}
	if e != s.node.Epoch() || s.node.Changing() {
		// Refused by the node, naming the epochs, before any check of
		// what it asks: the entry of another epoch may be another group.
		return s.node.Change(e, s.cfg.Topology.All(), nil)
	}
	if err := s.checkChange(next); err != nil {
		return err
	}
	next.Epoch = e + 1
	return s.node.Change(e, s.cfg.Topology.All(), appendEpochConfig([]byte{controlMembers}, next))
}

// checkChange checks a change at the group that takes it.
func (s *State) checkChange(next EpochConfig) error {
	p, err := protocol.Lookup(s.cfg.Protocol)
	if err != nil {
		return err
	}
	if entry := p.ChangeEntry(s.top); entry != s.cfg.Self {
		return fmt.Errorf("%w: %w: changes enter at group %s, not %s", ErrChangeRefused, multicast.ErrNotEntry,
			s.cfg.Topology.Name(entry), s.cfg.Topology.Name(s.cfg.Self))
	}
	if p.NeedsTree() && next.Parent == nil {
		return fmt.Errorf("%w: the change drops the tree, which protocol %s needs", ErrChangeRefused, p.Name())
	}
	if _, err := s.epochTopology(next); err != nil {
		return fmt.Errorf("%w: %w", ErrChangeRefused, err)
	}
	cur := s.EpochConfig()
	if next.Members == nil && cur.Members != nil {
		return fmt.Errorf("%w: the change drops the members of epoch %d (a change names every group's)", ErrChangeRefused, cur.Epoch)
	}
	if err := s.checkMoveChange(cur, next); err != nil {
		return fmt.Errorf("%w: %w", ErrChangeRefused, err)
	}
	return nil
}

// Begin implements rawnode.Builder: the node calls it at its delivery of
// every change, c. The group adds the next epoch's configuration to its
// table, and returns the core of the generation it starts when the change
// alters the overlay under a protocol that orders by it (FlexCast, tree);
// else nil: the core goes on.
func (s *State) Begin(c rawnode.Change) (multicast.Core, partition.Ranks, error) {
	next := s.decodeControl(c)
	if last := s.epochs[len(s.epochs)-1]; last.Epoch != c.Epoch {
		panic(fmt.Sprintf("group: change of epoch %d delivered at epoch %d", c.Epoch, last.Epoch))
	}
	cur := s.EpochConfig()
	s.resetDst()
	s.beginMoves(cur, next)
	s.epochs = append(s.epochs, next)
	if len(s.epochs) > EpochsKept {
		s.epochs = slices.Delete(s.epochs, 0, len(s.epochs)-EpochsKept)
	}
	if next.SameOverlay(cur) {
		return nil, partition.Ranks{}, nil
	}
	top, err := s.epochTopology(next)
	if err != nil {
		return nil, partition.Ranks{}, err
	}
	s.top = top
	p, err := protocol.Lookup(s.cfg.Protocol)
	if err != nil || !p.Rebuilds() {
		return nil, partition.Ranks{}, err
	}
	core, err := p.New(s.cfg.Self, top)
	return core, top.Ranks(), err
}

// RestoreCore implements rawnode.Builder: the core of the generation that
// started at epoch from, from its snapshot.
func (s *State) RestoreCore(from uint64, b []byte) (multicast.Core, partition.Ranks, error) {
	i := slices.IndexFunc(s.epochs, func(c EpochConfig) bool { return c.Epoch == from })
	if i < 0 {
		return nil, partition.Ranks{}, fmt.Errorf("no configuration of epoch %d (kept: %d to %d)", from, s.epochs[0].Epoch, s.EpochConfig().Epoch)
	}
	top, err := s.epochTopology(s.epochs[i])
	if err != nil {
		return nil, partition.Ranks{}, err
	}
	return s.restoreCore(top, b)
}

// restoreCore restores a core of the epoch whose topology is top.
func (s *State) restoreCore(top *partition.Topology, b []byte) (multicast.Core, partition.Ranks, error) {
	p, err := protocol.Lookup(s.cfg.Protocol)
	if err != nil {
		return nil, partition.Ranks{}, err
	}
	top = p.CoreTopology(top)
	core, err := p.Restore(s.cfg.Self, top, b)
	return core, top.Ranks(), err
}

// epochTopology returns the topology of epoch c: the groups of the
// configuration, ranked by c's overlay, with c's tree.
func (s *State) epochTopology(c EpochConfig) (*partition.Topology, error) {
	return s.cfg.Topology.WithOverlay(c.Overlay, c.Parent)
}

// Topology returns the topology of the group's epoch: the groups ranked by
// its overlay, with its tree. Route by it (protocol.Entry).
func (s *State) Topology() *partition.Topology { return s.top }

// decodeControl returns the configuration a delivered change starts.
func (s *State) decodeControl(c rawnode.Change) EpochConfig {
	var next EpochConfig
	var d *wire.Decoder
	if len(c.Config) > 0 && c.Config[0] == controlMembers {
		d = wire.NewDecoder(c.Config[1:])
		next = decodeEpochConfig(d, s.cfg.Topology.Len())
	} else {
		d = wire.NewDecoder(c.Config)
		next = decodeOverlay(d, s.cfg.Topology.Len())
		next.keepFrom(s.EpochConfig())
	}
	if err := d.Finish(); err != nil {
		// The group that took the change encoded and checked it.
		panic(fmt.Sprintf("group: change of epoch %d delivered with a malformed configuration: %v", c.Epoch, err))
	}
	next.Epoch = c.Epoch + 1
	return next
}

// appendEpochs appends the table of configurations to a snapshot, each
// with its members.
func (s *State) appendEpochs(b []byte) []byte {
	b = wire.AppendUvarint(b, uint64(len(s.epochs)))
	for _, c := range s.epochs {
		b = wire.AppendUvarint(b, c.Epoch)
		b = appendEpochConfig(b, c)
	}
	return b
}

// decodeEpochs reads what appendEpochs wrote: consecutive epochs; with
// members, unless written before them (snapshot version 3).
func decodeEpochs(d *wire.Decoder, n int, withMembers bool) []EpochConfig {
	k := d.Count(3)
	if k == 0 && d.Err() == nil {
		d.Fail("no epoch")
	}
	if k > EpochsKept {
		d.Fail("%d epochs, at most %d", k, EpochsKept)
	}
	var out []EpochConfig
	for i := range k {
		e := d.Uvarint()
		var c EpochConfig
		if withMembers {
			c = decodeEpochConfig(d, n)
		} else {
			c = decodeOverlay(d, n)
		}
		if d.Err() != nil {
			return nil
		}
		if e == 0 || (i > 0 && e != out[i-1].Epoch+1) {
			d.Fail("epoch %d after %d", e, out[max(i-1, 0)].Epoch)
			return nil
		}
		c.Epoch = e
		out = append(out, c)
	}
	return out
}

// abortedMagic starts the payload the machine hands the executor in place
// of a delivery that the stop-sign aborted: no transaction payload starts
// with it (they start with their kind, a small number).
const abortedMagic byte = 0xfd

// AbortedPayload returns the payload of a delivery aborted because its
// epoch ended before it was delivered, at epoch (Machine.Apply).
func AbortedPayload(epoch uint64) []byte {
	return wire.AppendUvarint([]byte{abortedMagic, 0}, epoch)
}

// EpochAborted reports whether payload is an AbortedPayload, and the epoch
// it names. An executor answers such a delivery with an abort that says the
// epoch changed, at every destination alike.
func EpochAborted(payload []byte) (epoch uint64, ok bool) {
	if len(payload) < 3 || payload[0] != abortedMagic || payload[1] != 0 {
		return 0, false
	}
	d := wire.NewDecoder(payload[2:])
	e := d.Uvarint()
	if d.Finish() != nil {
		return 0, false
	}
	return e, true
}

// forExecutor returns the deliveries of out as the executor runs them:
// those the stop-sign aborted carry an AbortedPayload naming the epoch the
// group was in when it delivered them; the others are out's.
func forExecutor(out rawnode.Output, epochAfter uint64) []multicast.Message {
	if len(out.Aborted) == 0 {
		return out.Deliveries
	}
	ds := slices.Clone(out.Deliveries)
	aborted := out.Aborted
	for k := range ds {
		if len(aborted) == 0 {
			break
		}
		if ds[k].ID != aborted[0] {
			continue
		}
		aborted = aborted[1:]
		e := epochAfter
		for _, c := range out.Changes {
			if c.At > k {
				e--
			}
		}
		ds[k].Payload = AbortedPayload(e)
	}
	return ds
}
