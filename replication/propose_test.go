package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// Requests made at once share log entries (proposeLoop), and each caller
// still gets its own request's outcome: accepted, a duplicate, or refused
// for a session that does not exist, in any mix within one entry. Every
// replica delivers each accepted request once.
func TestConcurrentRequestsShareEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestClusterWith(t, protocol.FlexCast, 1, 3, clusterOpts{durable: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lead := c.reps[0][c.leader(0)].r
	const callers, each = 32, 20
	sids := make([]uint64, callers)
	for i := range sids {
		var err error
		if sids[i], err = lead.OpenSession(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := lead.RaftStatus().LastIndex
	dst := partition.SetOf(0)
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for w := range callers {
		wg.Go(func() {
			for i := range each {
				seq := uint64(i + 1)
				m := multicast.Message{ID: multicast.MsgID{Client: sids[w], Seq: seq}, Dst: dst, Payload: []byte("x")}
				if err := lead.Multicast(ctx, m, 0); err != nil {
					errs <- fmt.Errorf("caller %d, request %d: %w", w, i, err)
					return
				}
				// The same request again is a duplicate, and a session
				// never opened is refused, whatever shares its entry.
				if err := lead.Multicast(ctx, m, 0); !errors.Is(err, group.ErrDuplicate) {
					errs <- fmt.Errorf("caller %d, request %d again: %w, want %w", w, i, err, group.ErrDuplicate)
					return
				}
				bad := multicast.Message{ID: multicast.MsgID{Client: group.SessionID(0, 1<<20+uint64(w)), Seq: seq}, Dst: dst, Payload: []byte("x")}
				if err := lead.Multicast(ctx, bad, 0); !errors.Is(err, group.ErrSessionExpired) {
					errs <- fmt.Errorf("caller %d, request %d without a session: %w, want %w", w, i, err, group.ErrSessionExpired)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	requests := uint64(3 * callers * each)
	entries := lead.RaftStatus().LastIndex - before
	t.Logf("%d requests in %d log entries (ticks included)", requests, entries)
	if entries >= requests {
		t.Errorf("%d requests took %d log entries: none shared one", requests, entries)
	}
	// Every replica delivers every accepted request once.
	deadline := time.Now().Add(10 * time.Second)
	for _, tr := range c.reps[0] {
		for {
			ds, err := tr.rec.Deliveries()
			if err != nil {
				t.Fatal(err)
			}
			seen := map[multicast.MsgID]int{}
			for _, d := range ds {
				seen[d.ID]++
			}
			ok := len(seen) == callers*each
			for id, n := range seen { //flexkv:unordered each checked alone
				if n != 1 {
					t.Fatalf("replica %s delivered %s %d times", tr.cfg.ID, id, n)
				}
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("replica %s delivered %d of %d requests", tr.cfg.ID, len(seen), callers*each)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}
