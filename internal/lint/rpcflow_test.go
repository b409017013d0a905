package lint

import (
	"path/filepath"
	"slices"
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
			if generatedFile(name) {
				// The gateway's RegisterKVHandlerFromEndpoint, which the
				// module does not call: it registers on its own
				// connection (server/http.go).
				continue
			}
			src := string(readFile(t, filepath.Join(root, filepath.FromSlash(dir), name)))
			// A server's options come from rpcflow.ServerOptions, or from
			// a Guard's (rpcflow.NewGuard), which sets the windows of its
			// port.
			for _, c := range []struct {
				makes string
				uses  []string
			}{
				{"grpc.NewClient(", []string{"rpcflow.DialOptions()"}},
				{"grpc.NewServer(", []string{"rpcflow.ServerOptions()", "rpcflow.NewGuard("}},
			} {
				if !strings.Contains(src, c.makes) {
					continue
				}
				checked++
				if !slices.ContainsFunc(c.uses, func(u string) bool { return strings.Contains(src, u) }) {
					t.Errorf("%s/%s calls %s without %s", dir, name, c.makes, strings.Join(c.uses, " or "))
				}
			}
		}
	}
	if checked < 4 {
		t.Errorf("%d files make gRPC connections or servers, want at least 4 (client, server, transmitter, status): is the search wrong?", checked)
	}
}
