package client

import (
	"context"
	"testing"
	"time"
)

// hang is a behaviour that answers nothing until the call's context ends.
func hang(ctx context.Context) error {
	<-ctx.Done()
	return ctx.Err()
}

// TestAttemptTimeout: a leader that accepts a request and never answers
// costs the client one attempt (AttemptTimeout), not the call's deadline:
// the client moves on, is sent back by a follower's hint, and the leader's
// next answer ends the call. Without the bound the call would wait out its
// context on the first attempt.
func TestAttemptTimeout(t *testing.T) {
	cl := newFakeCluster(t, fakeOptions{})
	cl.setLeader(0, 0)
	cl.rep[0][0].then("get", hang)
	c := newTestClient(t, cl, func(cfg *Config) { cfg.AttemptTimeout = 100 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, _, err := c.Get(ctx, []byte("a/k")); err != nil {
		t.Fatalf("Get: %v", err)
	}
	// At least the one it held and the retry; a loaded machine can make
	// the retry time out too.
	if n := cl.count(0, 0, "get"); n < 2 {
		t.Errorf("the leader got %d gets, want 2 or more (the one it held, then the retry)", n)
	}
	if _, err := New(context.Background(), Config{Endpoints: []string{cl.endpoint(0, 0)}, AttemptTimeout: -time.Second}); err == nil {
		t.Errorf("New with a negative attempt timeout: no error")
	}
}
