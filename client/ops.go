package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// The single-key operations run at the leader of the key's group and are
// linearizable: writes as one-operation transactions through the group's
// log, reads on the leader's state after a read index (the leader confirms
// it still leads, and its state holds everything committed before the
// read). GetStale reads any replica's state as it is. A key of a replicated
// partition is read at the home group; a write to one goes to every group,
// as a Txn.

// route validates op as a one-operation transaction and returns its
// destinations.
func (c *Client) route(op txn.Op) (*txn.Txn, partition.GroupSet, error) {
	if err := c.live(); err != nil {
		return nil, 0, err
	}
	t := &txn.Txn{Then: []txn.Op{op}}
	dst, err := t.Destinations(c.epochRoute.Load().pm, c.view.Groups, c.view.Home)
	if err != nil {
		return nil, 0, err
	}
	return t, dst, nil
}

// single runs rpc at the leader of the one group of dst, holding a session
// of the pool: a write under the session's next id there (renewing the
// session as run does), a read under none (client 0, seq 0: reads are not
// deduplicated).
func (c *Client) single(ctx context.Context, what string, op txn.Op, write bool,
	rpc func(ctx context.Context, kv apipb.KVClient, client, seq uint64, opts ...grpc.CallOption) error,
) error {
	s, err := c.acquire(ctx)
	if err != nil {
		return err
	}
	defer c.release(s)
	for renewed, changed := 0, 0; ; renewed++ {
		// Routed again after an epoch change: the key's partition may
		// have moved (DESIGN 14).
		_, dst, err := c.route(op)
		if err != nil {
			return err
		}
		if dst.Len() != 1 {
			panic(fmt.Sprintf("client: invariant violated: single-group %s with destinations %s", what, dst))
		}
		g := dst.Min()
		var client, seq uint64
		if write {
			if client, err = c.sessionAt(ctx, s, g); err != nil {
				return err
			}
			s.seq++
			seq = s.seq
		}
		var o outcome
		err = c.invoke(ctx, g, true, what, func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
			var md metadata.MD
			err := rpc(ctx, kv, client, seq, append(opts, grpc.Trailer(&md))...)
			o.attempt(err, md)
			c.epochFromTrailer(md)
			return err
		})
		if epochChanged(err) && changed < epochResubmits && ctx.Err() == nil {
			// It ran nowhere (epoch.go): again under the next id.
			changed++
			renewed--
			c.resubmits.Add(1)
			c.learnEpochOrWait(ctx, g, changed)
			continue
		}
		if !write {
			return err
		}
		err = expired(err, what+" "+multicast.MsgID{Client: client, Seq: seq}.String(), &o)
		if !errors.Is(err, errRenew) {
			return err
		}
		s.ids[g] = 0
		if renewed == renewals {
			return &classError{class: ErrSessionExpired, err: fmt.Errorf("client: group %s: %d sessions in a row expired before their first request: %w", c.view.Groups.Name(g), renewals+1, err)}
		}
	}
}

// Get returns the value stored at key, and whether there is one.
func (c *Client) Get(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	var resp *apipb.GetResponse
	err = c.single(ctx, "get", txn.Op{Kind: txn.OpGet, Key: key}, false, func(ctx context.Context, kv apipb.KVClient, client, seq uint64, opts ...grpc.CallOption) error {
		var err error
		resp, err = kv.Get(ctx, &apipb.GetRequest{ClientId: client, Seq: seq, Key: key}, opts...)
		return err
	})
	if err != nil {
		return nil, false, err
	}
	if !resp.GetFound() {
		return nil, false, nil
	}
	value = resp.GetValue()
	if value == nil {
		value = []byte{}
	}
	return value, true, nil
}

// GetStale returns the value stored at key as a replica of its group holds
// it now, without confirming it with the group's leader (DESIGN 6's local
// read): cheaper, but possibly stale, even older than a value this client
// wrote or read before.
func (c *Client) GetStale(ctx context.Context, key []byte) (value []byte, found bool, err error) {
	_, dst, err := c.route(txn.Op{Kind: txn.OpGet, Key: key})
	if err != nil {
		return nil, false, err
	}
	var resp *apipb.GetResponse
	err = c.invoke(ctx, dst.Min(), false, "stale get", func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = kv.Get(ctx, &apipb.GetRequest{Key: key, Stale: true}, opts...)
		return err
	})
	if err != nil || !resp.GetFound() {
		return nil, false, err
	}
	value = resp.GetValue()
	if value == nil {
		value = []byte{}
	}
	return value, true, nil
}

// write runs the write op: through rpc at the leader of the key's group, or
// as a Txn when the key is replicated (every group holds it).
func (c *Client) write(ctx context.Context, what string, op txn.Op,
	rpc func(ctx context.Context, kv apipb.KVClient, client, seq uint64, opts ...grpc.CallOption) error,
) error {
	t, dst, err := c.route(op)
	if err != nil {
		return err
	}
	if dst.Len() > 1 {
		_, err := c.Txn(ctx, t)
		return err
	}
	return c.single(ctx, what, op, true, rpc)
}

// Put stores value at key.
func (c *Client) Put(ctx context.Context, key, value []byte) error {
	return c.write(ctx, "put", txn.Op{Kind: txn.OpPut, Key: key, Value: value}, func(ctx context.Context, kv apipb.KVClient, client, seq uint64, opts ...grpc.CallOption) error {
		_, err := kv.Put(ctx, &apipb.PutRequest{ClientId: client, Seq: seq, Key: key, Value: value}, opts...)
		return err
	})
}

// Delete removes key; deleting a missing key is no error.
func (c *Client) Delete(ctx context.Context, key []byte) error {
	return c.write(ctx, "delete", txn.Op{Kind: txn.OpDelete, Key: key}, func(ctx context.Context, kv apipb.KVClient, client, seq uint64, opts ...grpc.CallOption) error {
		_, err := kv.Delete(ctx, &apipb.DeleteRequest{ClientId: client, Seq: seq, Key: key}, opts...)
		return err
	})
}

// Scan returns up to limit keys of [start, end) with their values, in key
// order; the range may span partitions of several groups, and must overlap
// at least one partition. limit is 1..txn.ScanLimitMax, or 0 for
// txn.ScanLimitMax.
//
// Scan reads a partition at a time, at the leader of the partition's group,
// asking each for the part of the range it holds, and goes on at the next
// partition while keys are wanted. A server answers at most its byte bound
// of keys and values at a time (server.ScanBytesMaxDefault, 1 MiB) and says
// where the rest starts: Scan asks for the following pages itself. Each
// page is linearizable on its own, but a scan of several pages is not one
// snapshot: a write between two pages shows in the later one only, and a
// transfer between two partitions may show half done. ScanConsistent reads
// one cut.
func (c *Client) Scan(ctx context.Context, start, end []byte, limit int) ([]txn.KV, error) {
	if limit == 0 {
		limit = txn.ScanLimitMax
	}
	if _, _, err := c.route(txn.Op{Kind: txn.OpScan, Key: start, End: end, Limit: limit}); err != nil {
		return nil, err
	}
	spans, err := c.epochRoute.Load().pm.Spans(start, end)
	if err != nil {
		return nil, &classError{class: txn.ErrInvalid, err: fmt.Errorf("client: scan: %w", err)}
	}
	var out []txn.KV
	for _, sp := range spans {
		if len(out) == limit {
			break
		}
		// Each part at its group, whose servers serve their partition
		// and no further.
		for from := sp.Start; ; {
			var resp *apipb.ScanResponse
			want := limit - len(out)
			err = c.single(ctx, "scan", txn.Op{Kind: txn.OpScan, Key: from, End: sp.End, Limit: want}, false, func(ctx context.Context, kv apipb.KVClient, client, seq uint64, opts ...grpc.CallOption) error {
				var err error
				resp, err = kv.Scan(ctx, &apipb.ScanRequest{ClientId: client, Seq: seq, Start: from, End: sp.End, Limit: uint32(want)}, opts...)
				return err
			})
			if err != nil {
				return nil, err
			}
			page := api.KVsFromProto(resp.GetKvs())
			if err := checkPage(page, from, sp.End, want, resp.GetNextStart()); err != nil {
				return nil, err
			}
			out = append(out, page...)
			if len(resp.GetNextStart()) == 0 {
				break
			}
			from = resp.GetNextStart()
		}
	}
	return out, nil
}

// ScanConsistent returns up to limit keys of [start, end) with their
// values, in key order, as Scan does, but read in one read-only transaction
// multicast to every group that owns a part of the range and ordered like
// any other: one cut of the whole range, in which a transaction that wrote
// in several of its partitions shows whole or not at all. It is answered
// whole or not at all: when the first limit keys hold more bytes of keys
// and values than the server's scan byte bound (1 MiB unless configured),
// it fails, matching ErrScanTooLarge, and the error names the bound.
//
// The request goes to the leader of the transaction's entry group, which
// runs it and collects the other groups' parts.
func (c *Client) ScanConsistent(ctx context.Context, start, end []byte, limit int) ([]txn.KV, error) {
	if limit == 0 {
		limit = txn.ScanLimitMax
	}
	_, dst, err := c.route(txn.Op{Kind: txn.OpScan, Key: start, End: end, Limit: limit})
	if err != nil {
		return nil, err
	}
	// By the ranks of the latest epoch whose topology the client has.
	entry := c.proto.Entry(c.epochRoute.Load().top, c.view.Latency, c.origin, dst)
	var resp *apipb.ScanResponse
	err = c.invoke(ctx, entry, true, "consistent scan", func(ctx context.Context, kv apipb.KVClient, opts ...grpc.CallOption) error {
		var err error
		resp, err = kv.Scan(ctx, &apipb.ScanRequest{Start: start, End: end, Limit: uint32(limit), Consistent: true}, opts...)
		return err
	})
	if status.Code(err) == codes.OutOfRange {
		return nil, &classError{class: ErrScanTooLarge, err: err}
	}
	if err != nil {
		return nil, err
	}
	page := api.KVsFromProto(resp.GetKvs())
	if err := checkPage(page, start, end, limit, resp.GetNextStart()); err != nil {
		return nil, err
	}
	if len(resp.GetNextStart()) > 0 {
		return nil, fmt.Errorf("client: consistent scan from %q: %w: the answer goes on at %q, but a consistent scan is answered whole", start, ErrInconsistent, resp.GetNextStart())
	}
	return page, nil
}

// checkPage checks a page of a scan of [from, end) for up to want keys that
// goes on at next (nil: the last page): its keys ascend within the range,
// and a page that goes on is not empty, holds fewer than want keys, and goes
// on after its last key and before end. Otherwise the scan could loop, or
// return keys twice or out of order.
func checkPage(page []txn.KV, from, end []byte, want int, next []byte) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("client: scan from %q: %w: "+format, append([]any{from, ErrInconsistent}, args...)...)
	}
	if len(page) > want {
		return bad("%d keys, asked for %d", len(page), want)
	}
	prev := from
	for i, kv := range page {
		if (i > 0 && bytes.Compare(kv.Key, prev) <= 0) || (i == 0 && bytes.Compare(kv.Key, prev) < 0) || (len(end) > 0 && bytes.Compare(kv.Key, end) >= 0) {
			return bad("key %q out of order or out of the range", kv.Key)
		}
		prev = kv.Key
	}
	if len(next) == 0 {
		return nil
	}
	switch {
	case len(page) == 0, len(page) == want:
		return bad("a page of %d keys (of %d asked) that goes on", len(page), want)
	case bytes.Compare(next, prev) <= 0, len(end) > 0 && bytes.Compare(next, end) >= 0:
		return bad("goes on at %q, not after its last key %q and before the end", next, prev)
	}
	return nil
}
