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
			if !strings.Contains(src, "grpc.NewClient(") && !strings.Contains(src, "grpc.NewServer(") {
				continue
			}
			checked++
			if !strings.Contains(src, "rpcflow.DialOptions()") && !strings.Contains(src, "rpcflow.ServerOptions()") {
				t.Errorf("%s/%s makes a gRPC connection or server without rpcflow's options", dir, name)
			}
		}
	}
	if checked < 4 {
		t.Errorf("%d files make gRPC connections or servers, want at least 4 (client, server, transmitter, status): is the search wrong?", checked)
	}
}
