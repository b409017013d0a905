package replication

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/flexkv/flexkv/multicast/protocol"
)

// TestExistingEmptyRefusesVotes: a follower whose data is wiped restarts
// with Existing (`--initial-cluster-state existing`, DESIGN 13); its
// group's leader dies before it catches up. The one other replica, which
// holds the committed log, needs the wiped one's vote and must not get it:
// with an empty log the wiped replica refuses every (pre-)vote, so no
// leader is elected until the old leader returns; then the wiped replica
// catches up and the group serves again.
func TestExistingEmptyRefusesVotes(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster test")
	}
	c := newTestCluster(t, protocol.Names()[0], 2, 3, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := c.load(ctx, 7, 2, 50); err != nil {
		t.Fatal(err)
	}
	l := c.leader(0)
	f, o := (l+1)%3, (l+2)%3
	c.stop(0, f)
	if err := os.RemoveAll(c.reps[0][f].cfg.Dir); err != nil {
		t.Fatal(err)
	}
	c.stop(0, l)
	c.reps[0][f].cfg.Existing = true
	c.start(0, f)
	wiped, other := c.reps[0][f].r, c.reps[0][o].r
	// Ten election timeouts (300ms by default): the other replica
	// campaigns again and again.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if wiped.IsLeader() || other.IsLeader() {
			t.Fatalf("a leader was elected with the vote of a replica with an empty log (other leads: %v)", other.IsLeader())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := wiped.VotesRefused(); n == 0 {
		t.Fatalf("wiped replica refused %d votes, want some (other: %+v)", n, other.RaftStatus())
	}
	if got := other.VotesRefused(); got != 0 {
		t.Fatalf("replica started without Existing refused %d votes, want 0", got)
	}
	c.start(0, l)
	c.leader(0)
	if err := c.load(ctx, 8, 2, 50); err != nil {
		t.Fatal(err)
	}
	c.settle(30 * time.Second)
	if st := wiped.RaftStatus(); st.LastIndex == 0 {
		t.Fatalf("wiped replica's log is still empty after the group moved on: %+v", st)
	}
}
