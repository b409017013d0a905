package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// Epochs (DESIGN 14). Every request carries the epoch of the topology the
// client routed it with (Epoch). An entry group that ended that epoch
// refuses it, and destinations that delivered it after the end abort it
// alike: in both cases it ran nowhere. The client then learns the new epoch
// (the entry group's Topology) and resubmits the request as a new one (its
// session's next id), up to epochResubmits times: the caller sees no error.
// Changes keep the overlay so far, so the routing itself does not change;
// the members of a group may (DESIGN 14): the client takes the replicas'
// addresses of every newer epoch it learns.

// epochResubmits bounds the resubmissions of one call for changed epochs:
// each needs a change of the cluster while it runs.
const epochResubmits = 16

// Epoch returns the epoch the client routes with: the Topology's at New,
// then the latest it learned.
func (c *Client) Epoch() uint64 { return c.epoch.Load() }

// EpochResubmits returns how many requests the client resubmitted because
// an epoch changed under them.
func (c *Client) EpochResubmits() uint64 { return c.resubmits.Load() }

// epochChanged reports whether err says that a request did not run for its
// epoch: refused by its entry group (apipb.EpochChangedText), or aborted at
// its destinations (txn.ErrEpochChanged; a single-key write's Aborted
// status).
func epochChanged(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, txn.ErrEpochChanged) {
		return true
	}
	st, ok := status.FromError(err)
	if !ok {
		// A status wrapped in the client's own errors.
		var se interface{ GRPCStatus() *status.Status }
		if !errors.As(err, &se) {
			return false
		}
		st = se.GRPCStatus()
	}
	switch st.Code() {
	case codes.FailedPrecondition, codes.Aborted:
		return strings.Contains(st.Message(), apipb.EpochChangedText)
	default:
		return false
	}
}

// learnEpoch asks group g for its epoch and keeps it when it is newer.
func (c *Client) learnEpoch(ctx context.Context, g partition.GroupID) {
	err := c.invoke(ctx, g, false, "topology", func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		resp, err := kv.Topology(ctx, &apipb.TopologyRequest{}, opts...)
		if err == nil {
			c.advanceEpoch(resp.GetEpoch())
			c.takeMembers(resp)
			c.takeRoute(resp)
		}
		return err
	})
	if err != nil {
		c.log.Debug("client: could not learn the epoch", "group", c.view.Groups.Name(g), "error", err)
	}
}

// learnEpochOrWait learns group g's epoch (learnEpoch) and, when it was
// no newer than the client's, waits a moment growing with tries before the
// request goes again: groups deliver a change each at its own pace, and the
// one that told the client of it may be ahead of the one it routes to now.
func (c *Client) learnEpochOrWait(ctx context.Context, g partition.GroupID, tries int) {
	before := c.epochRoute.Load()
	c.learnEpoch(ctx, g)
	if c.epochRoute.Load() != before {
		return
	}
	t := time.NewTimer(time.Duration(min(tries, 10)) * 20 * time.Millisecond)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-c.done:
	}
}

// membersRefreshGap spaces the topology fetches of refreshMembers.
const membersRefreshGap = 200 * time.Millisecond

// refreshMembers asks the replica at addr for the topology of its epoch,
// after a leader hint named an address outside a group's replicas, and
// takes its members when its epoch is newer than the client's members
// (takeMembers). It reports whether it took them. At most one fetch per
// membersRefreshGap: a stale hint costs one call now and then.
func (c *Client) refreshMembers(ctx context.Context, addr string) bool {
	now := time.Now().UnixNano()
	last := c.membersRefreshed.Load()
	if now-last < int64(membersRefreshGap) || !c.membersRefreshed.CompareAndSwap(last, now) {
		return false
	}
	conn, err := c.conn(addr)
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, c.attempt)
	defer cancel()
	resp, err := apipb.NewKVClient(conn).Topology(ctx, &apipb.TopologyRequest{})
	if err != nil {
		return false
	}
	c.advanceEpoch(resp.GetEpoch())
	c.takeRoute(resp)
	return c.takeMembers(resp)
}

// epochRoute is the topology of an epoch, by which the client routes the
// requests it sends with that epoch: the entry group of a message is
// chosen by the epoch's ranks and tree (DESIGN 14).
type epochRoute struct {
	epoch uint64
	top   *partition.Topology
	// pm is the epoch's partition map: its owners change when a partition
	// moves (DESIGN 14).
	pm *partition.PartitionMap
}

// takeRoute takes the topology of a Topology answer when its epoch is
// newer than the route's. An answer the client cannot read is ignored: the
// route stays, and the group refuses what it routes for its epoch.
func (c *Client) takeRoute(resp *apipb.TopologyResponse) {
	top, err := api.EpochTopology(resp, c.view.Groups)
	var pm *partition.PartitionMap
	if err == nil {
		pm, err = epochPartitions(resp, c.view)
	}
	if err != nil {
		c.log.Debug("client: topology of a new epoch not taken", "epoch", resp.GetEpoch(), "error", err)
		return
	}
	next := &epochRoute{epoch: resp.GetEpoch(), top: top, pm: pm}
	for {
		cur := c.epochRoute.Load()
		if next.epoch <= cur.epoch || c.epochRoute.CompareAndSwap(cur, next) {
			return
		}
	}
}

// advanceEpoch keeps e when it is newer than the client's epoch, and
// reports whether it did.
func (c *Client) advanceEpoch(e uint64) bool {
	for {
		cur := c.epoch.Load()
		if e <= cur {
			return false
		}
		if c.epoch.CompareAndSwap(cur, e) {
			return true
		}
	}
}

// takeMembers takes the replicas' addresses of a topology of a newer
// epoch, and reports whether it did: its groups must be the client's
// (changes keep them); a group missing from it, or without a replica,
// keeps its addresses.
func (c *Client) takeMembers(resp *apipb.TopologyResponse) bool {
	if c.oneEndpoint {
		return false
	}
	c.membersMu.Lock()
	defer c.membersMu.Unlock()
	if resp.GetEpoch() <= c.membersEpoch {
		return false
	}
	c.membersEpoch = resp.GetEpoch()
	next := slices.Clone(*c.replicas.Load())
	for _, g := range resp.GetGroups() {
		id, ok := c.view.Groups.Lookup(g.GetName())
		if !ok || len(g.GetReplicas()) == 0 {
			continue
		}
		addrs := make([]string, 0, len(g.GetReplicas()))
		for _, r := range g.GetReplicas() {
			addrs = append(addrs, r.GetGrpc())
		}
		next[id] = addrs
	}
	c.replicas.Store(&next)
	return true
}

// epochFromTrailer keeps the epoch an "epoch changed" refusal names.
func (c *Client) epochFromTrailer(md metadata.MD) {
	for _, v := range md.Get(apipb.EpochTrailer) {
		if e, err := strconv.ParseUint(v, 10, 64); err == nil {
			c.advanceEpoch(e)
		}
	}
}

// epochPartitions returns the partition map of a Topology answer: the
// view's ranges with the owners the answer names.
func epochPartitions(resp *apipb.TopologyResponse, view *Topology) (*partition.PartitionMap, error) {
	owners := view.Partitions.Owners()
	changed := false
	for _, p := range resp.GetPartitions() {
		i, ok := view.Partitions.Index(p.GetName())
		if !ok || p.GetReplicated() {
			continue
		}
		g, ok := view.Groups.Lookup(p.GetGroup())
		if !ok {
			return nil, fmt.Errorf("client: partition %s: unknown owner %q", p.GetName(), p.GetGroup())
		}
		changed = changed || owners[i] != g
		owners[i] = g
	}
	if !changed {
		return view.Partitions, nil
	}
	return view.Partitions.WithOwners(view.Groups, owners)
}
