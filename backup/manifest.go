// Package backup takes, checks and restores consistent backups of a whole
// FlexKV cluster (DESIGN 14, Backup): `flexkv backup create|verify|restore`.
//
// A backup is a directory:
//
//	DIR/manifest.json     the Manifest
//	DIR/GROUP/PATH        the files of one replica's checkpoint of GROUP's
//	                      store at the backup marker
//
// Create asks a replica of the entry group to multicast a backup marker to
// every group (the Backup RPC); at its delivery, a consistent cut, every
// replica of every group checkpoints its store. Create then copies one
// replica's checkpoint per group over the client API (BackupFiles, TLS,
// streamed), writes the manifest with each file's size and SHA-256, and
// drops the checkpoints (DropBackup). Verify checks a backup against its
// manifest; Restore seeds one replica's data directory of a new cluster
// from its group's copy.
package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ManifestFile is the name of a backup's manifest in its directory.
const ManifestFile = "manifest.json"

// FormatVersion is the version of the backup format that this package
// writes and reads.
const FormatVersion = 1

// BootstrapEpoch is the epoch of a configuration as the bootstrap YAML
// gives it (DESIGN 14, Epochs): the epoch of every backup taken of a
// cluster whose Topology reply names none, and of every restored cluster.
const BootstrapEpoch = 1

// Manifest describes a backup (DESIGN 14).
type Manifest struct {
	Format    int    `json:"format"`
	ClusterID string `json:"cluster_id"`
	Epoch     uint64 `json:"epoch"`
	// Config is the canonical text of the cluster configuration
	// (partition.ClusterConfig.Canonical) in force at the marker;
	// Partitions its partitions, which a restore's configuration must map
	// to the same groups.
	Config     string      `json:"config"`
	Protocol   string      `json:"protocol"`
	Partitions []Partition `json:"partitions"`
	// Marker is the backup marker's id, "c<client>.<seq>": the name of the
	// checkpoints.
	Marker  string  `json:"marker"`
	Created string  `json:"created"` // RFC 3339, UTC
	Groups  []Group `json:"groups"`
}

// Partition is a partition of the configuration: its key range, and its
// group (empty when replicated).
type Partition struct {
	Name       string `json:"name"`
	Start      string `json:"start"`
	End        string `json:"end,omitempty"`
	Group      string `json:"group,omitempty"`
	Replicated bool   `json:"replicated,omitempty"`
}

// Group is one group's copy: the replica it came from, the group's applied
// index at the marker (the raft entry that ran it), and its files, under
// DIR/Name.
type Group struct {
	Name         string `json:"name"`
	Replica      string `json:"replica"`
	AppliedIndex uint64 `json:"applied_index"`
	Files        []File `json:"files"`
	Bytes        int64  `json:"bytes"`
}

// File is a file of a group's copy.
type File struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// Bytes is the total size of the backup's files.
func (m *Manifest) Bytes() int64 {
	n := int64(0)
	for _, g := range m.Groups {
		n += g.Bytes
	}
	return n
}

// Group returns the copy of group name.
func (m *Manifest) Group(name string) (*Group, bool) {
	i := slices.IndexFunc(m.Groups, func(g Group) bool { return g.Name == name })
	if i < 0 {
		return nil, false
	}
	return &m.Groups[i], true
}

// writeManifest writes m as dir's manifest, atomically.
func writeManifest(dir string, m *Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, ManifestFile+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, ManifestFile))
}

// ReadManifest reads and checks the manifest of the backup in dir.
func ReadManifest(dir string) (*Manifest, error) {
	b, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	var m Manifest
	d := json.NewDecoder(strings.NewReader(string(b)))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("backup: %s: %w", ManifestFile, err)
	}
	if err := m.check(); err != nil {
		return nil, fmt.Errorf("backup: %s: %w", ManifestFile, err)
	}
	return &m, nil
}

// check returns the first problem of m's form.
func (m *Manifest) check() error {
	switch {
	case m.Format != FormatVersion:
		return fmt.Errorf("format %d, want %d", m.Format, FormatVersion)
	case m.ClusterID == "" || m.Marker == "" || m.Config == "":
		return errors.New("no cluster_id, marker or config")
	case len(m.Groups) == 0:
		return errors.New("no groups")
	}
	seen := map[string]bool{}
	for _, g := range m.Groups {
		if g.Name == "" || seen[g.Name] || !localPath(g.Name) || strings.Contains(g.Name, "/") {
			return fmt.Errorf("group %q: empty, repeated or not a plain name", g.Name)
		}
		seen[g.Name] = true
		n := int64(0)
		for _, f := range g.Files {
			if !localPath(f.Path) || f.Size < 0 || len(f.SHA256) != 2*sha256.Size {
				return fmt.Errorf("group %s: file %q: bad path, size or sha256", g.Name, f.Path)
			}
			n += f.Size
		}
		if n != g.Bytes {
			return fmt.Errorf("group %s: files of %d bytes, bytes says %d", g.Name, n, g.Bytes)
		}
	}
	return nil
}

// localPath reports whether p is a relative path that stays below its
// directory.
func localPath(p string) bool {
	return p != "" && filepath.IsLocal(filepath.FromSlash(p))
}

// FileError is a file of a backup that does not match its manifest.
type FileError struct {
	Group, Path string
	Problem     string // missing, truncated, longer, corrupted, unexpected
	Detail      string
}

func (e *FileError) Error() string {
	return fmt.Sprintf("backup: group %s: file %s: %s (%s)", e.Group, e.Path, e.Problem, e.Detail)
}

// Verify checks the backup in dir: its manifest, and every file of every
// group against its size and SHA-256; a file the manifest does not name is
// an error too. It returns the manifest, and every problem found, each a
// *FileError naming the file (joined).
func Verify(dir string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, g := range m.Groups {
		errs = append(errs, verifyGroup(dir, &g)...)
	}
	if len(errs) > 0 {
		return m, errors.Join(errs...)
	}
	return m, nil
}

func verifyGroup(dir string, g *Group) []error {
	var errs []error
	named := map[string]bool{}
	for _, f := range g.Files {
		named[f.Path] = true
		if err := verifyFile(filepath.Join(dir, g.Name, filepath.FromSlash(f.Path)), f); err != nil {
			err.Group = g.Name
			errs = append(errs, err)
		}
	}
	root := filepath.Join(dir, g.Name)
	walkErr := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel = filepath.ToSlash(rel); !named[rel] {
			errs = append(errs, &FileError{Group: g.Name, Path: rel, Problem: "unexpected", Detail: "not in the manifest"})
		}
		return nil
	})
	if walkErr != nil && !errors.Is(walkErr, os.ErrNotExist) {
		errs = append(errs, fmt.Errorf("backup: group %s: %w", g.Name, walkErr))
	}
	return errs
}

func verifyFile(path string, f File) *FileError {
	fe := &FileError{Path: f.Path}
	r, err := os.Open(path)
	if err != nil {
		fe.Problem, fe.Detail = "missing", err.Error()
		return fe
	}
	defer r.Close()
	h := sha256.New()
	n, err := io.Copy(h, r)
	switch {
	case err != nil:
		fe.Problem, fe.Detail = "unreadable", err.Error()
	case n < f.Size:
		fe.Problem, fe.Detail = "truncated", fmt.Sprintf("%d bytes, the manifest says %d", n, f.Size)
	case n > f.Size:
		fe.Problem, fe.Detail = "longer", fmt.Sprintf("%d bytes, the manifest says %d", n, f.Size)
	case hex.EncodeToString(h.Sum(nil)) != f.SHA256:
		fe.Problem, fe.Detail = "corrupted", "its SHA-256 is not the manifest's"
	default:
		return nil
	}
	return fe
}
