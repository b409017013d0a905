package txn

import (
	"errors"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

func TestReleaseNote(t *testing.T) {
	id := multicast.MsgID{Client: 1<<64 - 1, Seq: 1<<64 - 2}
	b := AppendRelease(nil, id, 63)
	if !IsRelease(b) || len(b) > releaseBytesMax {
		t.Fatalf("note %x: IsRelease %v, %d bytes (at most %d)", b, IsRelease(b), len(b), releaseBytesMax)
	}
	gotID, g, err := DecodeRelease(b)
	if err != nil || gotID != id || g != 63 {
		t.Fatalf("DecodeRelease = %s, %d, %v; want %s, 63", gotID, g, err, id)
	}
	vote := AppendVote(nil, id, Vote{Group: 2, Holds: true})
	if IsRelease(vote) {
		t.Fatal("a vote is taken for a release note")
	}
	for name, bad := range map[string][]byte{
		"a vote":          vote,
		"trailing byte":   append(AppendRelease(nil, id, 1), 0),
		"truncated":       b[:len(b)-1],
		"group too large": append(multicast.AppendMsgID([]byte{releaseTag}, id), byte(partition.GroupsMax)),
		"too long":        make([]byte, releaseBytesMax+1),
	} {
		if _, _, err := DecodeRelease(bad); !errors.Is(err, wire.ErrCorrupt) {
			t.Errorf("%s: DecodeRelease = %v, want wire.ErrCorrupt", name, err)
		}
	}
}
