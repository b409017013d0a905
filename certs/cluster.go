package certs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// NodeSpec is a node certificate EnsureCluster creates: the replica's
// identity and the hosts it is dialled at.
type NodeSpec struct {
	ID    NodeID
	Hosts []string
}

// EnsureCluster makes dir hold everything a cluster runs secure with: the
// CA (its key at caKeyFile), a node certificate per spec and a client
// certificate per user. It creates only what is missing, so that it may run
// at every start of a deployment (a one-shot container, flexkv local): an
// existing CA is loaded from caKeyFile to sign what is new. It returns the
// files it created.
func EnsureCluster(dir, caKeyFile string, nodes []NodeSpec, users []string) ([]string, error) {
	var created []string
	var ca *CA
	var err error
	if exists(filepath.Join(dir, CAFile)) {
		ca, err = LoadCA(dir, caKeyFile)
	} else {
		ca, err = CreateCA(dir, caKeyFile, Options{})
		created = append(created, filepath.Join(dir, CAFile), caKeyFile)
	}
	if err != nil {
		return created, err
	}
	for _, n := range nodes {
		if exists(filepath.Join(dir, NodeCertFile(n.ID.Replica))) {
			continue
		}
		if _, err := ca.CreateNode(dir, n.ID, n.Hosts, Options{}); err != nil {
			return created, err
		}
		created = append(created, filepath.Join(dir, NodeCertFile(n.ID.Replica)), filepath.Join(dir, NodeKeyFile(n.ID.Replica)))
	}
	for _, u := range users {
		if exists(filepath.Join(dir, ClientCertFile(u))) {
			continue
		}
		if _, err := ca.CreateClient(dir, u, Options{}); err != nil {
			return created, err
		}
		created = append(created, filepath.Join(dir, ClientCertFile(u)), filepath.Join(dir, ClientKeyFile(u)))
	}
	return created, nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return !errors.Is(err, fs.ErrNotExist)
}
