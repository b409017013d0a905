package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/flexkv/flexkv/partition"
)

// ClusterState is how a replica starts on an empty data directory, like
// etcd's --initial-cluster-state (DESIGN 13).
type ClusterState string

const (
	// ClusterNew bootstraps raft, with the group's replicas of the
	// configuration, on an empty data directory; a directory with data is
	// reopened as it is. The default.
	ClusterNew ClusterState = "new"
	// ClusterExisting never bootstraps: on an empty data directory the
	// replica waits for its group's leader to send it a snapshot or the
	// log, and grants no vote while its log is empty (no raft amnesia).
	// For a replica whose data was lost, joining its running group.
	ClusterExisting ClusterState = "existing"
)

// ParseClusterState parses --initial-cluster-state; "" is ClusterNew.
func ParseClusterState(s string) (ClusterState, error) {
	switch ClusterState(s) {
	case "", ClusterNew:
		return ClusterNew, nil
	case ClusterExisting:
		return ClusterExisting, nil
	}
	return "", fmt.Errorf("server: initial cluster state %q: want new or existing", s)
}

// identityFile, in a replica's data directory, records who the replica is
// (DESIGN 13): written once, at its first start, and checked at every
// later one.
const identityFile = "identity.json"

// Identity is a replica's cluster identity.
type Identity struct {
	// ClusterID names the cluster. It is derived from the canonical
	// configuration the cluster was created with (a hash of it, apart from
	// the fingerprint's), not given by a flag: every replica of a new
	// cluster computes the same id without being told, and so does a
	// replica that lost its data and rejoins (`existing`). Since a replica
	// refuses to start with a configuration other than its own, the id
	// stays the cluster's for its whole life.
	ClusterID string `json:"cluster_id"`
	// Fingerprint is partition.Fingerprint of Config, which peers compare
	// on every call between groups.
	Fingerprint string `json:"fingerprint"`
	Group       string `json:"group"`
	Replica     string `json:"replica"`
	// Config is the canonical configuration text
	// (partition.ClusterConfig.Canonical), kept so that a mismatch can be
	// named field by field.
	Config string `json:"config"`
}

// clusterID derives a cluster id from canonical configuration text.
func clusterID(canonical string) string {
	sum := sha256.Sum256([]byte("flexkv cluster id\n" + canonical))
	return hex.EncodeToString(sum[:8])
}

// identityDiffsMax bounds the differences a refusal names.
const identityDiffsMax = 5

// loadIdentity checks the identity in dir against this replica's
// configuration, or writes it when dir has none (a first start, or a
// directory from before identities: its data is taken as this
// configuration's). A replica of another configuration, or another replica
// of this one, is refused, naming what differs.
func loadIdentity(dir, group, replica string, cfg *partition.ClusterConfig) (Identity, error) {
	canonical := cfg.Canonical()
	now := Identity{ClusterID: clusterID(canonical), Fingerprint: partition.Fingerprint(canonical), Group: group, Replica: replica, Config: canonical}
	path := filepath.Join(dir, identityFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return now, writeFileSync(path, now)
	}
	if err != nil {
		return Identity{}, fmt.Errorf("server: identity: %w", err)
	}
	var was Identity
	if err := json.Unmarshal(data, &was); err != nil {
		return Identity{}, fmt.Errorf("server: identity %s: %w", path, err)
	}
	if was.Group != group || was.Replica != replica {
		return Identity{}, fmt.Errorf("server: data directory %s belongs to replica %s/%s, not %s/%s", dir, was.Group, was.Replica, group, replica)
	}
	if was.Fingerprint != now.Fingerprint || was.Config != canonical {
		diff := partition.CanonicalDiff(was.Config, canonical, identityDiffsMax)
		return Identity{}, fmt.Errorf("server: configuration differs from the one this replica was created with (cluster %s, fingerprint %s, now %s): %s",
			was.ClusterID, was.Fingerprint, now.Fingerprint, strings.Join(diff, "; "))
	}
	return was, nil
}

// writeFileSync writes id to path atomically and durably: a temporary file
// beside it, fsynced, renamed over path, the directory fsynced.
func writeFileSync(path string, id Identity) error {
	data, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("server: identity: %w", err)
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("server: identity: %w", err)
	}
	return nil
}
