package partition

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Canonical returns the configuration as canonical text, one field a line,
// `path = "value"`, in a fixed order: what a replica's identity fingerprints
// (DESIGN 13). Defaults are resolved (a group's region, the overlay, a
// replica's peer address), so that two files that configure the same
// cluster agree, and the tree is sorted by child. The latency matrix is
// left out: it emulates a WAN for a run and does not change who the
// cluster is.
func (c *ClusterConfig) Canonical() string {
	var b strings.Builder
	line := func(path, v string) { fmt.Fprintf(&b, "%s = %s\n", path, strconv.Quote(v)) }
	line("protocol", c.Protocol)
	if !c.Strict() {
		// Only where it is not the default, so that the fingerprints of
		// the configurations that say nothing stay what they were.
		line("consistency", c.Consistency)
	}
	overlay := c.Overlay
	if len(overlay) == 0 {
		for _, g := range c.Groups {
			overlay = append(overlay, g.Name)
		}
	}
	for i, g := range overlay {
		line(fmt.Sprintf("overlay[%d]", i), g)
	}
	for _, child := range slices.Sorted(maps.Keys(c.Tree)) {
		line("tree."+child, c.Tree[child])
	}
	for i, g := range c.Groups {
		p := fmt.Sprintf("groups[%d]", i)
		line(p+".name", g.Name)
		region := g.Region
		if region == "" {
			region = g.Name
		}
		line(p+".region", region)
		for j, r := range g.Replicas {
			rp := fmt.Sprintf("%s.replicas[%d]", p, j)
			line(rp+".id", r.ID)
			line(rp+".raft", r.Raft)
			line(rp+".grpc", r.GRPC)
			line(rp+".peer", r.PeerAddr())
		}
	}
	for i, pc := range c.Partitions {
		p := fmt.Sprintf("partitions[%d]", i)
		line(p+".name", pc.Name)
		line(p+".start", pc.Start)
		line(p+".end", pc.End)
		line(p+".group", pc.Group)
		line(p+".replicated", strconv.FormatBool(pc.Replicated))
	}
	return b.String()
}

// Fingerprint returns the fingerprint of canonical text (Canonical): the
// first 8 bytes of its SHA-256, in hex. It tells configurations apart; it
// authenticates nothing (TLS does).
func Fingerprint(canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return hex.EncodeToString(sum[:8])
}

// CanonicalDiff names the fields that differ between two canonical texts,
// in the order of was then of now, at most limit of them (and how many more):
// `groups[1].replicas[0].grpc was "h:1", now "h:2"`. It returns nil when
// they agree.
func CanonicalDiff(was, now string, limit int) []string {
	wasF, wasKeys := canonicalFields(was)
	nowF, nowKeys := canonicalFields(now)
	var out []string
	n := 0
	add := func(s string) {
		if n++; n <= limit {
			out = append(out, s)
		}
	}
	for _, k := range wasKeys {
		w := wasF[k]
		v, ok := nowF[k]
		switch {
		case !ok:
			add(fmt.Sprintf("%s was %s, now absent", k, w))
		case v != w:
			add(fmt.Sprintf("%s was %s, now %s", k, w, v))
		}
	}
	for _, k := range nowKeys {
		if _, ok := wasF[k]; !ok {
			add(fmt.Sprintf("%s was absent, now %s", k, nowF[k]))
		}
	}
	if n > limit {
		out = append(out, fmt.Sprintf("and %d more", n-limit))
	}
	return out
}

// canonicalFields splits canonical text into its fields (path -> quoted
// value) and their paths in order.
func canonicalFields(s string) (map[string]string, []string) {
	fields := make(map[string]string)
	var keys []string
	for l := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSuffix(l, "\n"), " = ")
		if !ok {
			continue
		}
		if _, dup := fields[k]; !dup {
			keys = append(keys, k)
		}
		fields[k] = v
	}
	return fields, keys
}
