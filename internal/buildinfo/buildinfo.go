// Package buildinfo reads what the Go toolchain recorded in the running
// binary about how it was built: the module version, the version control
// revision and time, and the Go version. The command line prints it
// (flexkv version) and the server exports it as a metric, so that a
// cluster whose replicas run different builds shows it during an upgrade.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// Info is what one binary knows about its own build. Fields the toolchain did
// not record (a binary built outside a checkout has no revision; a test
// binary has no module version) are empty.
type Info struct {
	Version   string `json:"version"`            // the module version, "(devel)" for a build from a checkout
	Revision  string `json:"revision,omitempty"` // the VCS revision the binary was built from
	Time      string `json:"time,omitempty"`     // the commit time of that revision, RFC 3339
	Modified  bool   `json:"modified"`           // the work tree had uncommitted changes
	GoVersion string `json:"go_version"`
}

// Read returns the build information of the running binary.
func Read() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return Info{Version: "unknown", GoVersion: "unknown"}
	}
	return fromBuildInfo(bi)
}

func fromBuildInfo(bi *debug.BuildInfo) Info {
	info := Info{Version: bi.Main.Version, GoVersion: bi.GoVersion}
	if info.Version == "" {
		info.Version = "unknown"
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			info.Revision = s.Value
		case "vcs.time":
			info.Time = s.Value
		case "vcs.modified":
			info.Modified = s.Value == "true"
		}
	}
	return info
}

// String is the one line `flexkv version` prints: version, revision (short,
// with "+dirty" when modified), commit time and Go version.
func (i Info) String() string {
	parts := []string{"flexkv " + i.Version}
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if i.Modified && !strings.HasSuffix(i.Version, "+dirty") {
			rev += "+dirty"
		}
		parts = append(parts, "revision "+rev)
	}
	if i.Time != "" {
		parts = append(parts, "built from a commit of "+i.Time)
	}
	parts = append(parts, i.GoVersion)
	return strings.Join(parts, ", ")
}

// ShortRevision is the revision's first twelve characters, or "unknown".
func (i Info) ShortRevision() string {
	switch {
	case i.Revision == "":
		return "unknown"
	case len(i.Revision) > 12:
		return i.Revision[:12]
	default:
		return i.Revision
	}
}
