package lint

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestConnectionsUseFixedWindows checks that every file outside tests that
// makes a gRPC client connection or server also uses package rpcflow's
// options: a connection made without them runs gRPC's bandwidth estimator,
// a PING for most messages (internal/rpcflow).
func TestConnectionsUseFixedWindows(t *testing.T) {
	root := repoRoot(t)
	checked := 0
	for _, dir := range packageDirs(t, root, ".") {
		if underDir(dir, "internal/rpcflow") {
			continue
		}
		names, err := goFiles(filepath.Join(root, filepath.FromSlash(dir)), false)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			src := string(readFile(t, filepath.Join(root, filepath.FromSlash(dir), name)))
			for _, c := range []struct{ makes, uses string }{
				{"grpc.NewClient(", "rpcflow.DialOptions()"},
				{"grpc.NewServer(", "rpcflow.ServerOptions()"},
			} {
				if !strings.Contains(src, c.makes) {
					continue
				}
				checked++
				if !strings.Contains(src, c.uses) {
					t.Errorf("%s/%s calls %s without %s", dir, name, c.makes, c.uses)
				}
			}
		}
	}
	if checked < 4 {
		t.Errorf("%d files make gRPC connections or servers, want at least 4 (client, server, transmitter, status): is the search wrong?", checked)
	}
}
