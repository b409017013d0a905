package server

import (
	"context"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// An Await names its transaction by (client_id, seq); a request that sets
// neither is read by the deprecated string id, which older clients send.
func TestAwaitID(t *testing.T) {
	for _, tc := range []struct {
		name string
		req  *apipb.AwaitRequest
		want multicast.MsgID
		bad  string // a part of the InvalidArgument message, "" if accepted
	}{
		{"numbers", &apipb.AwaitRequest{ClientId: 77, Seq: 3}, multicast.MsgID{Client: 77, Seq: 3}, ""},
		{"numbers win over the string", &apipb.AwaitRequest{ClientId: 77, Seq: 3, Id: "c1.1"}, multicast.MsgID{Client: 77, Seq: 3}, ""}, //nolint:staticcheck // the deprecated form
		{"deprecated string", &apipb.AwaitRequest{Id: "c77.3"}, multicast.MsgID{Client: 77, Seq: 3}, ""},                                //nolint:staticcheck // the deprecated form
		{"anonymous", &apipb.AwaitRequest{ClientId: 1<<63 | 5, Seq: 1}, multicast.MsgID{Client: 1<<63 | 5, Seq: 1}, ""},
		{"none", &apipb.AwaitRequest{}, multicast.MsgID{}, "no transaction id"},
		{"client only", &apipb.AwaitRequest{ClientId: 77}, multicast.MsgID{}, "seq 0"},
		{"seq only", &apipb.AwaitRequest{Seq: 3}, multicast.MsgID{}, "client_id 0"},
		{"flush", &apipb.AwaitRequest{ClientId: multicast.FlushClient, Seq: 1}, multicast.MsgID{}, "names no transaction"},
		{"bad string", &apipb.AwaitRequest{Id: "17"}, multicast.MsgID{}, `"17"`}, //nolint:staticcheck // the deprecated form
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := awaitID(tc.req)
			if tc.bad == "" {
				if err != nil || got != tc.want {
					t.Errorf("awaitID = %v, %v, want %v", got, err, tc.want)
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.bad) {
				t.Errorf("awaitID = %v, %v, want InvalidArgument containing %q", got, err, tc.bad)
			}
		})
	}
}

// The entry group refuses a transaction whose client computed other
// destinations, named by number: FailedPrecondition with
// apipb.DestinationsDifferText, or InvalidArgument for a number that is
// no group.
func TestCheckDestinations(t *testing.T) {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}, {Name: "c"}}})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{top: top, group: partition.GroupConfig{Name: "a"}}
	id := multicast.MsgID{Client: 64, Seq: 1}
	dst := partition.SetOf(0, 2)
	for _, tc := range []struct {
		name  string
		named []uint32
		code  codes.Code
		text  string
	}{
		{"none named", nil, codes.OK, ""},
		{"the same", []uint32{0, 2}, codes.OK, ""},
		{"another group", []uint32{0, 1}, codes.FailedPrecondition, apipb.DestinationsDifferText},
		{"fewer", []uint32{0}, codes.FailedPrecondition, "groups [0] (a), group a to [0 2] (a, c)"},
		{"more", []uint32{0, 1, 2}, codes.FailedPrecondition, apipb.DestinationsDifferText},
		{"twice", []uint32{0, 2, 2}, codes.FailedPrecondition, apipb.DestinationsDifferText},
		{"no such group", []uint32{0, 3}, codes.InvalidArgument, "destination_groups[1] is 3, not a group"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.checkDestinations(context.Background(), id, 0, tc.named, dst)
			if status.Code(err) != tc.code || (tc.text != "" && !strings.Contains(err.Error(), tc.text)) {
				t.Errorf("checkDestinations(%v) = %v, want %v containing %q", tc.named, err, tc.code, tc.text)
			}
		})
	}
}
