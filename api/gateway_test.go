package api

import (
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/flexkv/flexkv/api/apipb"
)

// TestGatewayText: the gateway's JSON writes bytes as text when every
// bytes field of an object is UTF-8, else as base64 with "encoding", and
// reads both.
func TestGatewayText(t *testing.T) {
	m := textJSON{}
	out := []struct {
		msg  proto.Message
		want string
	}{
		{&apipb.GetResponse{Found: true, Value: []byte("héllo <x>")}, `{"found":true,"value":"héllo <x>"}`},
		{&apipb.GetResponse{Found: true, Value: []byte{0xff, 0}}, `{"encoding":"base64","found":true,"value":"/wA="}`},
		{&apipb.ScanResponse{Kvs: []*apipb.KeyValue{{Key: []byte("a"), Value: []byte("b")}, {Key: []byte("c"), Value: []byte{0xc3}}}},
			`{"kvs":[{"key":"a","value":"b"},{"encoding":"base64","key":"Yw==","value":"ww=="}],"next_start":""}`},
	}
	for _, tc := range out {
		got, err := m.Marshal(tc.msg)
		if err != nil || string(got) != tc.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tc.msg, got, err, tc.want)
		}
	}
	in := []struct {
		body string
		want proto.Message
	}{
		{`{"value":"héllo"}`, &apipb.PutRequest{Value: []byte("héllo")}},
		{`{"value":"/wA=","encoding":"base64"}`, &apipb.PutRequest{Value: []byte{0xff, 0}}},
		{`{"client_id":"7","seq":2,"key":"k","value":""}`, &apipb.PutRequest{ClientId: 7, Seq: 2, Key: []byte("k"), Value: []byte{}}},
	}
	for _, tc := range in {
		got := &apipb.PutRequest{}
		if err := m.Unmarshal([]byte(tc.body), got); err != nil || !proto.Equal(got, tc.want) {
			t.Errorf("Unmarshal(%s) = %v, %v; want %v", tc.body, got, err, tc.want)
		}
	}
	for _, bad := range []string{`{"value":`, `{"value":"x"} 1`, `{"value":"x","encoding":"hex"}`, `{"valeu":"x"}`, `{"value":"*","encoding":"base64"}`, `[]`} {
		if err := m.Unmarshal([]byte(bad), &apipb.PutRequest{}); err == nil {
			t.Errorf("Unmarshal(%s): no error", bad)
		}
	}
}

func TestCodeName(t *testing.T) {
	for c, want := range map[codes.Code]string{codes.OK: "OK", codes.InvalidArgument: "INVALID_ARGUMENT", codes.Unauthenticated: "UNAUTHENTICATED", codes.DeadlineExceeded: "DEADLINE_EXCEEDED"} {
		if got := codeName(c); got != want {
			t.Errorf("codeName(%v) = %s, want %s", c, got, want)
		}
	}
}
