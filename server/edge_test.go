package server

import (
	"testing"

	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/replication/transport"
)

// TestEdges checks the bounds of the two ports for every cluster size: each
// is valid, a peer's largest batch fits its message bound and one window,
// and EdgeBytesMax is what the two ports hold at most.
func TestEdges(t *testing.T) {
	batch := transport.ServerConfig{FramesMax: group.InboundFramesMax, BytesMax: group.InboundBytesMax}.RequestBytesMax()
	for _, groups := range []int{1, 2, 3, 12, partition.GroupsMax} {
		api, peer := edges(groups)
		for _, e := range []struct {
			name string
			err  error
		}{{"client API", api.Validate()}, {"peer", peer.Validate()}} {
			if e.err != nil {
				t.Errorf("%d groups: %s: %v", groups, e.name, e.err)
			}
		}
		if peer.MessageBytesMax < batch || int(peer.StreamWindow) < batch+5 {
			t.Errorf("%d groups: peer messages of %d bytes, windows of %d: want room for a batch of %d and its prefix", groups, peer.MessageBytesMax, peer.StreamWindow, batch)
		}
		if peer.StreamsMax >= api.StreamsMax || peer.ConnBytesMax >= api.ConnBytesMax {
			t.Errorf("%d groups: the peer port allows %d calls and %d bytes a connection, the client API %d and %d: want fewer", groups, peer.StreamsMax, peer.ConnBytesMax, api.StreamsMax, api.ConnBytesMax)
		}
		cfg := &partition.ClusterConfig{Groups: make([]partition.GroupConfig, groups)}
		want := api.BytesMax
		if groups > 1 {
			want += peer.BytesMax
		}
		if got := EdgeBytesMax(cfg); got != want {
			t.Errorf("%d groups: EdgeBytesMax = %d, want %d", groups, got, want)
		}
	}
}
