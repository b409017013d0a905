package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"regexp"
	"slices"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// classError gives an error a class that errors.Is matches (txn.ErrInvalid,
// txn.ErrAborted) without the class's text in the message.
type classError struct {
	class error
	err   error
}

func (e *classError) Error() string        { return e.err.Error() }
func (e *classError) Unwrap() error        { return e.err }
func (e *classError) Is(target error) bool { return target == e.class }

// rpcFunc makes one call to one replica.
type rpcFunc func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error

// invoke calls rpc at group g until a replica answers, the answer is a
// failure that retrying cannot mend, or ctx ends. what names the call in
// errors and logs. With leader set the call needs the group's leader, and
// the replica that answers is remembered as the group's leader.
//
// It starts at the group's last known leader (else its first replica).
// Unavailable with a leader hint (apipb.LeaderTrailer) naming another replica
// of the group: go there. Unavailable without one, or a connection error:
// the group's next replica. ResourceExhausted (the server is full): the same
// replica again; but a ResourceExhausted that is gRPC's refusal of a message
// past its size limit (an answer larger than this client receives) is
// final, matching ErrTooLarge. A failed attempt is retried at once while the
// group's replicas have not all been tried since the last success, so that a dead
// replica or a stale leader costs one round trip; after that, with a
// jittered exponential backoff between backoffMin and backoffMax, so that
// a group without a leader is not hammered while it elects one.
// ResourceExhausted always waits. An attempt that gets no answer within
// AttemptTimeout, while ctx runs, counts as Unavailable without a hint.
func (c *Client) invoke(ctx context.Context, g partition.GroupID, leader bool, what string, rpc rpcFunc) error {
	replicas := (*c.replicas.Load())[g]
	name := c.view.Groups.Name(g)
	addr := c.leaderOf(g)
	misses := 0 // consecutive failed attempts
	var last error
	for {
		conn, err := c.conn(addr)
		if err != nil {
			return err
		}
		var trailer metadata.MD
		actx, cancel := context.WithTimeout(ctx, c.attempt)
		err = c.wanCall(actx, g, func() error { return rpc(actx, apipb.NewKVClient(conn), grpc.Trailer(&trailer)) })
		timedOut := err != nil && actx.Err() != nil
		cancel()
		if err == nil {
			if leader {
				c.setLeader(g, addr)
			}
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("client: %s at group %s: %w (last error from %s: %w)", what, name, cerr, addr, err)
		}
		select {
		case <-c.done:
			return ErrClosed
		default:
		}
		last = fmt.Errorf("%s: %w", addr, err)
		misses++
		wait := misses > len(replicas)
		code := status.Code(err)
		if timedOut {
			// Our context runs: this replica did not answer in time.
			code = codes.Unavailable
		}
		switch code {
		case codes.Unavailable:
			hint := ""
			if v := trailer.Get(apipb.LeaderTrailer); len(v) > 0 {
				hint = v[0]
			}
			// Only a replica of the group: a hint is a server's belief,
			// and following any address would let the set of
			// connections grow without bound.
			if hint != "" && hint != addr && !slices.Contains(replicas, hint) && c.refreshMembers(ctx, addr) {
				// The hint may name a member of an epoch the client has
				// not learned (DESIGN 14): a replica added since, now
				// leading. The group's members are the answering
				// replica's now.
				replicas = (*c.replicas.Load())[g]
			}
			var next string
			if hint != "" && hint != addr && slices.Contains(replicas, hint) {
				// A replica's belief of its leader, for every call:
				// also an Await, which a follower without the result
				// sends to the leader, is its group's next call.
				next = hint
				c.setLeader(g, hint)
			} else {
				next = replicas[(slices.Index(replicas, addr)+1)%len(replicas)]
			}
			c.log.Debug("client: retry at another replica", "call", what, "group", name, "from", addr, "to", next,
				"hint", hint, "error", err)
			addr = next
		case codes.ResourceExhausted:
			if tooLarge(err) {
				// A message past a gRPC size limit (ours on the answer,
				// the server's on the request) would be as large again.
				return &classError{class: ErrTooLarge, err: fmt.Errorf("client: %s at group %s: %s: %s: not retried: %w", what, name, addr, sizeText(err), err)}
			}
			wait = true
			c.log.Debug("client: server busy, retry", "call", what, "group", name, "at", addr, "error", err)
		case codes.DeadlineExceeded, codes.Canceled:
			// Our context is alive: the server ended the wait itself
			// (its own bound, a closing connection); the same id
			// again returns the outcome.
			c.log.Debug("client: server gave up, retry", "call", what, "group", name, "at", addr, "error", err)
		case codes.Aborted:
			// A single-key request that aborted: the same id again
			// would return the same abort.
			return &classError{class: txn.ErrAborted, err: fmt.Errorf("client: %s at group %s: %s: %w", what, name, addr, err)}
		case codes.InvalidArgument:
			return &classError{class: txn.ErrInvalid, err: fmt.Errorf("client: %s at group %s: rejected by %s: %w", what, name, addr, err)}
		default:
			return fmt.Errorf("client: %s at group %s: %s: %w", what, name, addr, err)
		}
		if wait {
			if err := c.sleep(ctx, c.backoff(max(1, misses-len(replicas)))); err != nil {
				return fmt.Errorf("client: %s at group %s: %w (last error from %w)", what, name, err, last)
			}
		}
	}
}

// gRPC's own refusals of a message past its size limits, the only
// ResourceExhausted that gRPC makes itself (grpc-go rpc_util.go, stream.go):
// "grpc: received message larger than max (N vs. M)", its forms after
// decompression, and "trying to send message larger than max (N vs. M)". A
// server's admission control (a full outbox) says something else.
var sizeRefusal = regexp.MustCompile(`message (?:after decompression )?larger than max`)

// sizeNumbers finds the sizes of a refusal: (message size vs. limit).
var sizeNumbers = regexp.MustCompile(`\((\d+) vs\. (\d+)\)`)

// tooLarge reports whether err is gRPC's refusal of a message past its size
// limit, at this client or at the server.
func tooLarge(err error) bool {
	st, ok := status.FromError(err)
	return ok && st.Code() == codes.ResourceExhausted && sizeRefusal.MatchString(st.Message())
}

// sizeText describes a refusal by size, with its numbers when gRPC gave
// them.
func sizeText(err error) string {
	m := sizeNumbers.FindStringSubmatch(status.Convert(err).Message())
	if m == nil {
		return "a message larger than gRPC's limit"
	}
	return fmt.Sprintf("a message of %s bytes, more than the limit of %s bytes (a client's receive limit: grpc.MaxCallRecvMsgSize in Config.DialOptions)", m[1], m[2])
}

// wanCall runs call between two emulated one-way delays to group g (none
// without Config.WANDelay). A context that ends during a delay ends the
// call with its error, as a network that loses the request would.
func (c *Client) wanCall(ctx context.Context, g partition.GroupID, call func() error) error {
	if c.wan == nil || c.wan[g] == 0 {
		return call()
	}
	if err := c.sleep(ctx, c.wan[g]); err != nil {
		return err
	}
	err := call()
	if serr := c.sleep(ctx, c.wan[g]); serr != nil && err == nil {
		return serr
	}
	return err
}

// backoff returns the wait before the n-th (from 1) delayed retry:
// backoffMin doubled n-1 times, at most backoffMax, jittered down by up to
// half so that clients that failed together do not retry together.
func (c *Client) backoff(n int) time.Duration {
	d := c.backoffMax
	if n < 32 {
		d = min(c.backoffMin<<(n-1), c.backoffMax)
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits for d, or until ctx ends or the client closes.
func (c *Client) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}
