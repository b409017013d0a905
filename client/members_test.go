package client

import (
	"context"
	"slices"
	"testing"
)

// TestHintOfANewMember: a client that knows group a by one replica (the
// members of an older epoch) is sent by it to a leader the client does not
// know, a member added since (DESIGN 14); it fetches the topology of the
// newer epoch from the replica that answered, takes the group's members,
// and follows the hint there.
func TestHintOfANewMember(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	old := *cl.cfg
	old.Groups = slices.Clone(cl.cfg.Groups)
	old.Groups[0].Replicas = cl.cfg.Groups[0].Replicas[:1]
	cl.mu.Lock()
	cl.topology = &old
	cl.mu.Unlock()
	c := newTestClient(t, cl, nil)
	if got := (*c.replicas.Load())[0]; len(got) != 1 {
		t.Fatalf("the client knows group a by %v, want one replica", got)
	}
	// Epoch 2 adds two members to a; the last one leads.
	cl.mu.Lock()
	cl.topology, cl.epoch = nil, 2
	cl.mu.Unlock()
	cl.setLeader(0, 2)
	if err := c.Put(context.Background(), []byte("a/k"), []byte("1")); err != nil {
		t.Fatal(err)
	}
	if v := valueOf(cl.stores[0], "a/k"); v != "1" {
		t.Errorf("a/k = %q, want 1", v)
	}
	if got, want := (*c.replicas.Load())[0], []string{cl.endpoint(0, 0), cl.endpoint(0, 1), cl.endpoint(0, 2)}; !slices.Equal(got, want) {
		t.Errorf("group a's replicas %v, want %v", got, want)
	}
	if n := cl.count(0, 1, "put") + cl.count(0, 1, "open"); n != 0 {
		t.Errorf("%d calls at replica 1, which neither leads nor was named", n)
	}
}
