package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/partition"
)

// TestMain gives every command the certificates of a test CA through
// FLEXKV_CERTS_DIR, as a deployment would: the client certificate of root,
// and a node certificate for every replica of configs/local.yaml on
// 127.0.0.1 (the tests move them to free ports). A test that starts a
// cluster of its own points the variable at that cluster's certificates.
func TestMain(m *testing.M) {
	if os.Getenv(asFlexkvEnv) == "1" {
		// A real `flexkv` process of the tests that run replicas as
		// processes (member_test.go): this binary, as the command.
		main()
		os.Exit(0)
	}
	dir, err := os.MkdirTemp("", "flexkv-cmd-certs")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := 1
	if err := makeTestCerts(dir); err != nil {
		fmt.Fprintln(os.Stderr, "test certificates:", err)
	} else {
		os.Setenv("FLEXKV_CERTS_DIR", filepath.Join(dir, "certs"))
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func makeTestCerts(dir string) error {
	certsDir := filepath.Join(dir, "certs")
	ca, err := certs.CreateCA(certsDir, filepath.Join(dir, "ca.key"), certs.Options{})
	if err != nil {
		return err
	}
	cfg, _, err := loadCluster("")
	if err != nil {
		return err
	}
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			if _, err := ca.CreateNode(certsDir, certs.NodeID{Group: g.Name, Replica: r.ID}, []string{"127.0.0.1"}, certs.Options{}); err != nil {
				return err
			}
		}
	}
	_, err = ca.CreateClient(certsDir, cluster.RootUser, certs.Options{})
	return err
}

// useCertsOf points the commands of test t at the certificates of l.
func useCertsOf(t *testing.T, l *cluster.Local) {
	t.Helper()
	t.Setenv("FLEXKV_CERTS_DIR", l.CertsDir())
}

// writeConfigAt writes cfg as YAML to path.
func writeConfigAt(t *testing.T, path string, cfg *partition.ClusterConfig) {
	t.Helper()
	data, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// configFile writes cfg as YAML to a cluster.yaml of a fresh temporary
// directory and returns its path.
func configFile(t *testing.T, cfg *partition.ClusterConfig) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "cluster.yaml")
	writeConfigAt(t, path, cfg)
	return path
}
