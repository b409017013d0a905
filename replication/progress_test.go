package replication

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
)

// TestPeerProgressRefusesPipelines: the replica's transport offers raft no
// pipeline (AppendEntriesPipeline says why), so raft replicates with
// AppendEntries, which peerProgress records and the transport bounds.
func TestPeerProgressRefusesPipelines(t *testing.T) {
	_, trans := raft.NewInmemTransport("a")
	p := newPeerProgress(trans)
	pl, err := p.AppendEntriesPipeline("b", "b")
	if pl != nil || !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		t.Fatalf("AppendEntriesPipeline = %v, %v; want no pipeline, raft.ErrPipelineReplicationNotSupported", pl, err)
	}
}
