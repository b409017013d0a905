package buildinfo

import (
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/flexkv/flexkv", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "19c832a0123456789abcdef0123456789abcdef0"},
			{Key: "vcs.time", Value: "2026-12-06T05:37:00Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	got := fromBuildInfo(bi)
	want := Info{Version: "v0.4.0", Revision: "19c832a0123456789abcdef0123456789abcdef0", Time: "2026-12-06T05:37:00Z", Modified: true, GoVersion: "go1.26.8"}
	if got != want {
		t.Fatalf("fromBuildInfo = %+v, want %+v", got, want)
	}
	if s, w := got.String(), "flexkv v0.4.0, revision 19c832a01234+dirty, built from a commit of 2026-12-06T05:37:00Z, go1.26.8"; s != w {
		t.Errorf("String() = %q, want %q", s, w)
	}
	if r := got.ShortRevision(); r != "19c832a01234" {
		t.Errorf("ShortRevision() = %q", r)
	}
	// A pseudo-version stamped from a modified tree says so itself.
	got.Version = "v0.0.0-20261206053700-19c832a01234+dirty"
	if s, w := got.String(), "flexkv v0.0.0-20261206053700-19c832a01234+dirty, revision 19c832a01234, built from a commit of 2026-12-06T05:37:00Z, go1.26.8"; s != w {
		t.Errorf("String() = %q, want %q", s, w)
	}
}

func TestFromBuildInfoWithoutVCS(t *testing.T) {
	got := fromBuildInfo(&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/flexkv/flexkv"}})
	if got.Version != "unknown" || got.Revision != "" || got.Modified {
		t.Fatalf("fromBuildInfo without version or VCS = %+v", got)
	}
	if s := got.String(); s != "flexkv unknown, go1.26.8" {
		t.Errorf("String() = %q", s)
	}
	if r := got.ShortRevision(); r != "unknown" {
		t.Errorf("ShortRevision() = %q, want unknown", r)
	}
}

// TestReadRunningBinary checks what the test binary itself reports: the
// toolchain always records its Go version.
func TestReadRunningBinary(t *testing.T) {
	got := Read()
	if !strings.HasPrefix(got.GoVersion, "go") {
		t.Errorf("Read().GoVersion = %q, want go...", got.GoVersion)
	}
	if got.Version == "" {
		t.Error("Read().Version is empty")
	}
}
