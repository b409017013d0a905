package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/txn"
)

// TestBadRequests sends malformed requests straight to a leader (no client
// library to catch them first): each gets the status code and a message
// naming the problem, and nothing is applied.
func TestBadRequests(t *testing.T) {
	l := startLocal(t, testcluster.Layout(t, "flexcast", testaddr.Cluster), t.TempDir())
	ctx := ctxTimeout(t, 60*time.Second)
	// Each call goes to eu-west-1's leader, found again if it answers
	// Unavailable (a leader deposed in a stall); the codes the cases want
	// are returned at once.
	err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte("w/0001/sentinel"), Value: []byte("kept")})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range badRequests {
		t.Run(tc.name, func(t *testing.T) {
			err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) error { return tc.call(ctx, c) })
			st, _ := status.FromError(err)
			if st.Code() != tc.code || !strings.Contains(st.Message(), tc.want) {
				t.Errorf("got %v %q, want %v containing %q", st.Code(), st.Message(), tc.code, tc.want)
			}
		})
	}
	checkNothingApplied(ctx, t, l)
}

// checkNothingApplied checks that no bad request of TestBadRequests was
// applied: the sentinel is as it was, and the keys they name are absent.
func checkNothingApplied(ctx context.Context, t *testing.T, l *Local) {
	t.Helper()
	var got *apipb.GetResponse
	err := callLeader(t, l, "eu-west-1", func(c apipb.KVClient) (err error) {
		got, err = c.Get(ctx, &apipb.GetRequest{Key: []byte("w/0001/sentinel")})
		return err
	})
	if err != nil || string(got.GetValue()) != "kept" {
		t.Errorf("sentinel = %q, %v: a bad request changed it", got.GetValue(), err)
	}
	for _, k := range []string{"w/0001/x", "w/0003/x"} {
		g := "eu-west-1"
		if k == "w/0003/x" {
			g = "eu-west-3"
		}
		var got *apipb.GetResponse
		err := callLeader(t, l, g, func(c apipb.KVClient) (err error) {
			got, err = c.Get(ctx, &apipb.GetRequest{Key: []byte(k)})
			return err
		})
		if err != nil || got.GetFound() {
			t.Errorf("%s = %q (found %v, err %v): a bad request wrote it", k, got.GetValue(), got.GetFound(), err)
		}
	}
}

// bigValue is one byte longer than a value may be.
var bigValue = strings.Repeat("v", txn.ValueMax+1)

// badAdd is an add of 5 to key.
func badAdd(key string) *apipb.Op {
	return &apipb.Op{Kind: apipb.OpKind_OP_KIND_ADD, Key: []byte(key), Int: 5}
}

// badTxnRequest is the request of tx.
func badTxnRequest(tx *apipb.Txn) *apipb.TxnRequest {
	return &apipb.TxnRequest{Body: &apipb.TxnRequest_Txn{Txn: tx}}
}

// tooManyOps is a transaction of one operation more than OpsMax.
func tooManyOps() *apipb.Txn {
	tx := &apipb.Txn{}
	for range txn.OpsMax + 1 {
		tx.Then = append(tx.Then, badAdd("w/0001/sentinel"))
	}
	return tx
}

// badRequest is a malformed call, the status code it must get and a part
// of the message that names the problem.
type badRequest struct {
	name string
	call func(context.Context, apipb.KVClient) error
	code codes.Code
	want string // in the message
}

// badRequests are TestBadRequests' calls, each to eu-west-1's leader.
var badRequests = []badRequest{
	{"put empty key", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: nil, Value: []byte("x")})
		return err
	}, codes.InvalidArgument, "empty"},
	{"put key in no partition", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte("zzz"), Value: []byte("x")})
		return err
	}, codes.InvalidArgument, "zzz"},
	{"put oversized value", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte("w/0001/sentinel"), Value: []byte(bigValue)})
		return err
	}, codes.InvalidArgument, "value"},
	{"put key too long", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte("w/0001/" + strings.Repeat("k", 5000)), Value: []byte("x")})
		return err
	}, codes.InvalidArgument, "key"},
	{"put key of another group", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte("w/0004/x"), Value: []byte("x")})
		return err
	}, codes.FailedPrecondition, "eu-west-3"},
	{"get empty key", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Get(ctx, &apipb.GetRequest{})
		return err
	}, codes.InvalidArgument, "empty"},
	{"get key in no partition", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Get(ctx, &apipb.GetRequest{Key: []byte("a/b")})
		return err
	}, codes.InvalidArgument, "a/b"},
	{"stale get of another group's key", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Get(ctx, &apipb.GetRequest{Key: []byte("w/0005/x"), Stale: true})
		return err
	}, codes.FailedPrecondition, "eu-central-1"},
	{"delete empty key", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Delete(ctx, &apipb.DeleteRequest{})
		return err
	}, codes.InvalidArgument, "empty"},
	{"scan of no partition", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Scan(ctx, &apipb.ScanRequest{Start: []byte("x"), End: []byte("y")})
		return err
	}, codes.InvalidArgument, `server: scan: partition: range ["x", "y"): no partition overlaps it`},
	{"consistent scan of no partition", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Scan(ctx, &apipb.ScanRequest{Start: []byte("j"), End: []byte("k"), Consistent: true})
		return err
	}, codes.InvalidArgument, `range ["j", "k"): no partition overlaps it`},
	{"stale consistent scan", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Scan(ctx, &apipb.ScanRequest{Start: []byte("w/0001/"), End: []byte("w/0003/"), Consistent: true, Stale: true})
		return err
	}, codes.InvalidArgument, "consistent and stale both set"},
	{"scan end before start", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Scan(ctx, &apipb.ScanRequest{Start: []byte("w/0001/b"), End: []byte("w/0001/a")})
		return err
	}, codes.InvalidArgument, "end"},
	{"scan limit too large", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Scan(ctx, &apipb.ScanRequest{Start: []byte("w/0001/"), End: []byte("w/0001/z"), Limit: txn.ScanLimitMax + 1})
		return err
	}, codes.InvalidArgument, "limit"},
	{"txn without body", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, &apipb.TxnRequest{})
		return err
	}, codes.InvalidArgument, "neither"},
	{"txn with no operations", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{}))
		return err
	}, codes.InvalidArgument, "no"},
	{"txn op without kind", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{Then: []*apipb.Op{{Key: []byte("w/0001/x")}}}))
		return err
	}, codes.InvalidArgument, "then[0]"},
	{"txn unknown op kind", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{Then: []*apipb.Op{{Kind: 42, Key: []byte("w/0001/x")}}}))
		return err
	}, codes.InvalidArgument, "then[0]"},
	{"txn compare without operand", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{If: []*apipb.Compare{{Key: []byte("w/0001/x"), Cmp: apipb.Cmp_CMP_EQUAL}}, Then: []*apipb.Op{badAdd("w/0001/x")}}))
		return err
	}, codes.InvalidArgument, "if[0]"},
	{"txn compare without relation", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{If: []*apipb.Compare{{Key: []byte("w/0001/x"), Operand: &apipb.Compare_Int{Int: 1}}}, Then: []*apipb.Op{badAdd("w/0001/x")}}))
		return err
	}, codes.InvalidArgument, "if[0]"},
	{"txn too many operations", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(tooManyOps()))
		return err
	}, codes.InvalidArgument, "operations"},
	{"txn put with an int", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0001/x"), Int: 3}}}))
		return err
	}, codes.InvalidArgument, "then[0]"},
	{"txn key in no partition", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{Then: []*apipb.Op{badAdd("w/0001/x"), badAdd("nowhere")}}))
		return err
	}, codes.InvalidArgument, "nowhere"},
	{"txn oversized value", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte("w/0001/x"), Value: []byte(bigValue)}}}))
		return err
	}, codes.InvalidArgument, "value"},
	{"txn unknown home group", func(ctx context.Context, c apipb.KVClient) error {
		r := badTxnRequest(&apipb.Txn{Then: []*apipb.Op{{Kind: apipb.OpKind_OP_KIND_GET, Key: []byte("item/1")}}})
		r.HomeGroup = "mars-1"
		_, err := c.Txn(ctx, r)
		return err
	}, codes.InvalidArgument, "mars-1"},
	{"txn at a group that is not its entry", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, badTxnRequest(&apipb.Txn{Then: []*apipb.Op{badAdd("w/0003/x"), badAdd("w/0005/x")}}))
		return err
	}, codes.FailedPrecondition, "entry"},
	{"txn seq without client", func(ctx context.Context, c apipb.KVClient) error {
		r := badTxnRequest(&apipb.Txn{Then: []*apipb.Op{badAdd("w/0001/x")}})
		r.Seq = 3
		_, err := c.Txn(ctx, r)
		return err
	}, codes.InvalidArgument, "client_id"},
	{"txn client without seq", func(ctx context.Context, c apipb.KVClient) error {
		r := badTxnRequest(&apipb.Txn{Then: []*apipb.Op{badAdd("w/0001/x")}})
		r.ClientId = 3
		_, err := c.Txn(ctx, r)
		return err
	}, codes.InvalidArgument, "seq"},
	{"txn larger than a request may carry", func(ctx context.Context, c apipb.KVClient) error {
		tx := &apipb.Txn{}
		for i := range 10 {
			tx.Then = append(tx.Then, &apipb.Op{Kind: apipb.OpKind_OP_KIND_PUT, Key: []byte(fmt.Sprintf("w/0001/big%d", i)), Value: []byte(strings.Repeat("b", 60000))})
		}
		_, err := c.Txn(ctx, badTxnRequest(tx))
		return err
	}, codes.InvalidArgument, "more than BytesMax"},
	{"raw put of a replicated key", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Put(ctx, &apipb.PutRequest{Key: []byte("item/1"), Value: []byte("x")})
		return err
	}, codes.FailedPrecondition, "replicated"},
	{"unknown procedure", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Txn(ctx, &apipb.TxnRequest{Body: &apipb.TxnRequest_Call{Call: &apipb.Call{Name: "new-order"}}})
		return err
	}, codes.InvalidArgument, "new-order"},
	{"await malformed id", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Await(ctx, &apipb.AwaitRequest{Id: "17"}) //nolint:staticcheck // a malformed id of the deprecated string form
		return err
	}, codes.InvalidArgument, "17"},
	{"await empty id", func(ctx context.Context, c apipb.KVClient) error {
		_, err := c.Await(ctx, &apipb.AwaitRequest{})
		return err
	}, codes.InvalidArgument, "id"},
	{"await never executed", func(ctx context.Context, c apipb.KVClient) error {
		ctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		defer cancel()
		_, err := c.Await(ctx, &apipb.AwaitRequest{ClientId: 99, Seq: 1})
		return err
	}, codes.DeadlineExceeded, ""},
}
