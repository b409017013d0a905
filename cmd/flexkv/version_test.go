package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/buildinfo"
)

func TestVersion(t *testing.T) {
	want := buildinfo.Read()
	code, stdout, stderr := runCmd(t, newRootCmd(), "version")
	if code != 0 || stdout != want.String()+"\n" {
		t.Fatalf("flexkv version: exit %d, stdout %q (stderr %q), want %q", code, stdout, stderr, want.String())
	}
	code, flagOut, _ := runCmd(t, newRootCmd(), "--version")
	if code != 0 || flagOut != stdout {
		t.Errorf("flexkv --version: exit %d, %q, want what `version` prints, %q", code, flagOut, stdout)
	}
	code, stdout, _ = runCmd(t, newRootCmd(), "version", "--json")
	var got buildinfo.Info
	if err := json.Unmarshal([]byte(stdout), &got); code != 0 || err != nil || got != want {
		t.Errorf("flexkv version --json: exit %d, %q (%v), want %+v", code, stdout, err, want)
	}
	if !strings.HasPrefix(got.GoVersion, "go") {
		t.Errorf("go_version = %q", got.GoVersion)
	}
	if code, _, stderr := runCmd(t, newRootCmd(), "version", "extra"); code != 2 || !strings.Contains(stderr, "extra") {
		t.Errorf("flexkv version extra: exit %d, stderr %q, want a usage error naming the argument", code, stderr)
	}
	if code, _, stderr := runCmd(t, newRootCmd(), "version", "--bogus"); code != 2 || !strings.Contains(stderr, "bogus") {
		t.Errorf("flexkv version --bogus: exit %d, stderr %q, want a usage error naming the flag", code, stderr)
	}
}
