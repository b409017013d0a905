package backup

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// RestoreOptions configure Restore.
type RestoreOptions struct {
	From    string                   // the backup's directory
	Config  *partition.ClusterConfig // the new cluster's configuration
	Node    string                   // the replica to seed
	DataDir string                   // its data directory: must not exist, or be empty
}

// Restore seeds the data directory of replica o.Node of a new cluster
// (DESIGN 14, like etcdutl snapshot restore) from its group's copy in the
// backup o.From: it verifies the backup first, refuses a configuration
// that maps the partitions to other groups than the backup's (naming the
// differences) and a data directory that is not empty. The new cluster has
// its own cluster id (server.RestoredClusterID, the same at every replica
// restored from this backup with this configuration), epoch
// BootstrapEpoch of o.Config, the backup's user data, and fresh protocol
// state, sessions and channels: start the replica with
// --initial-cluster-state new. It returns the manifest and the new
// cluster id.
func Restore(o RestoreOptions) (*Manifest, string, error) {
	m, err := Verify(o.From)
	if err != nil {
		return nil, "", fmt.Errorf("backup: restore refused: %w", err)
	}
	if _, _, _, err := protocol.Build(o.Config); err != nil {
		return nil, "", fmt.Errorf("backup: restore: configuration: %w", err)
	}
	if diff := partitionDiff(m.Partitions, partitionsOf(o.Config)); len(diff) > 0 {
		return nil, "", fmt.Errorf("backup: restore refused: the configuration maps the partitions otherwise than the backup: %s", strings.Join(diff, "; "))
	}
	gc, _, ok := o.Config.Replica(o.Node)
	if !ok {
		return nil, "", fmt.Errorf("backup: restore: node %q is not a replica of the configuration (replicas: %s)", o.Node, strings.Join(o.Config.ReplicaIDs(), ", "))
	}
	g, ok := m.Group(gc.Name)
	if !ok {
		return nil, "", fmt.Errorf("backup: restore: the backup has no copy of group %s of node %s", gc.Name, o.Node)
	}
	if err := CheckEmptyDir(o.DataDir); err != nil {
		return nil, "", fmt.Errorf("backup: restore refused: data directory: %w", err)
	}
	id := server.RestoredClusterID(m.ClusterID, m.Marker, o.Config)
	if err := server.SeedFromBackup(o.DataDir, o.Config, o.Node, id, filepath.Join(o.From, g.Name)); err != nil {
		return nil, "", fmt.Errorf("backup: restore: %w", err)
	}
	return m, id, nil
}

// partitionDiff names how got maps the partitions otherwise than want:
// partitions missing or added, and those whose range or group differs.
func partitionDiff(want, got []Partition) []string {
	byName := map[string]Partition{}
	for _, p := range got {
		byName[p.Name] = p
	}
	var diff []string
	seen := map[string]bool{}
	for _, w := range want {
		seen[w.Name] = true
		g, ok := byName[w.Name]
		switch {
		case !ok:
			diff = append(diff, fmt.Sprintf("partition %s (group %s) is not in the configuration", w.Name, ownerOf(w)))
		case g.Group != w.Group || g.Replicated != w.Replicated:
			diff = append(diff, fmt.Sprintf("partition %s belongs to group %s in the backup, %s in the configuration", w.Name, ownerOf(w), ownerOf(g)))
		case g.Start != w.Start || g.End != w.End:
			diff = append(diff, fmt.Sprintf("partition %s is [%q, %q) in the backup, [%q, %q) in the configuration", w.Name, w.Start, w.End, g.Start, g.End))
		}
	}
	for _, p := range got {
		if !seen[p.Name] {
			diff = append(diff, fmt.Sprintf("partition %s (group %s) is not in the backup", p.Name, ownerOf(p)))
		}
	}
	return diff
}

func ownerOf(p Partition) string {
	if p.Replicated {
		return "every group (replicated)"
	}
	return p.Group
}
