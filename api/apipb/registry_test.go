package apipb_test

import (
	"testing"

	"google.golang.org/protobuf/reflect/protoregistry"
	// etcd's API registers its kv.proto under the bare name "kv.proto"; a
	// FlexKV proto file registered under the same name made a program that
	// links both panic at init ("proto: file "kv.proto" is already
	// registered"). That this test starts at all is the first check.
	_ "go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/flexkv/flexkv/api/apipb"
)

// TestLinksBesideEtcd checks that FlexKV's client API and etcd's register
// their proto files under names of their own, so that one Go program can
// link both clients.
func TestLinksBesideEtcd(t *testing.T) {
	ours := apipb.File_flexkv_kv_v1_kv_proto
	if got, want := ours.Path(), "flexkv/kv/v1/kv.proto"; got != want {
		t.Fatalf("FlexKV's client API registers as %q, want %q", got, want)
	}
	for path, wantPkg := range map[string]string{
		"flexkv/kv/v1/kv.proto": "flexkv.kv.v1",
		"kv.proto":              "mvccpb",
	} {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if got := string(fd.Package()); got != wantPkg {
			t.Errorf("%s registers package %q, want %q", path, got, wantPkg)
		}
	}
}
