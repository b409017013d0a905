package partition

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ClusterConfig is the cluster configuration file (DESIGN 8), as plain
// structs: a YAML decoder fills them through the yaml tags, viper through the
// mapstructure tags (the same names). This package decodes nothing itself,
// so that it stays free of dependencies; a loader should decode strictly
// (yaml.Decoder.KnownFields, viper.UnmarshalExact) so that a misspelt field
// is an error rather than a silent default.
//
// Names of groups, replicas and partitions are lower-case (see NameMax):
// viper lower-cases map keys, the tree's child names among them, so a name
// with a capital would not match itself after loading.
type ClusterConfig struct {
	// Protocol is the ordering protocol, by name. Package partition lies
	// below the protocols and does not know them: the registry in
	// multicast/protocol checks the name (protocol.Build).
	Protocol string `yaml:"protocol" mapstructure:"protocol"`
	// Overlay lists every group once, by name, lowest FlexCast rank first:
	// it gives each group its GroupID. Empty: the order of Groups.
	Overlay []string `yaml:"overlay,omitempty" mapstructure:"overlay"`
	// Tree maps each group but the root to its parent in the tree of the
	// hierarchical protocol. Required by the tree protocol (protocol.Build
	// checks that); checked whenever given.
	Tree map[string]string `yaml:"tree,omitempty" mapstructure:"tree"`
	// Latency is the path of a latency matrix CSV (like
	// configs/aws-12-regions-latency-ms.csv), relative to the directory of
	// the configuration file unless absolute. Optional; see LoadLatency.
	Latency string `yaml:"latency,omitempty" mapstructure:"latency"`
	// Consistency is what the cluster guarantees its transactions (DESIGN
	// 12): ConsistencyStrict (the default, also when empty), whose results
	// are answered in real-time order, or ConsistencySerializable, which
	// answers each piece as soon as it ran, sooner, without that order.
	Consistency string            `yaml:"consistency,omitempty" mapstructure:"consistency"`
	Groups      []GroupConfig     `yaml:"groups" mapstructure:"groups"`
	Partitions  []PartitionConfig `yaml:"partitions" mapstructure:"partitions"`
	// EpochMembers marks the configuration of an epoch whose members
	// changed since the bootstrap file (DESIGN 14; never in a file): a
	// group may then hold any number of replicas up to EpochReplicasMax, as
	// it does while a learner is added or a replica replaced.
	EpochMembers bool `yaml:"-" mapstructure:"-"`
}

// GroupConfig describes one group and its replicas.
type GroupConfig struct {
	Name string `yaml:"name" mapstructure:"name"`
	// Region is the group's row in the latency matrix; empty: Name.
	Region   string          `yaml:"region,omitempty" mapstructure:"region"`
	Replicas []ReplicaConfig `yaml:"replicas" mapstructure:"replicas"`
}

// ReplicaConfig describes one replica: its raft server id and its
// listening addresses, each host:port with a host that the other replicas
// and the clients can dial.
type ReplicaConfig struct {
	// ID is unique in the whole cluster, not only in its group, so that a
	// server's node id alone names its group and replica (ClusterConfig.Replica).
	ID   string `yaml:"id" mapstructure:"id"`
	Raft string `yaml:"raft" mapstructure:"raft"` // raft, inside the group
	GRPC string `yaml:"grpc" mapstructure:"grpc"` // gRPC client API
	// Peer is the gRPC address of the service between groups, which
	// clients never reach (DESIGN 13); empty: the gRPC port + 100 on the
	// gRPC host (PeerAddr).
	Peer string `yaml:"peer,omitempty" mapstructure:"peer"`
	// HTTP is the address of the replica's HTTP/JSON gateway of the
	// client API (DESIGN 7); empty: none, unless `flexkv server --http`
	// names one. It is not part of the cluster's identity (the
	// configuration fingerprint, DESIGN 13): no other replica dials it.
	HTTP string `yaml:"http,omitempty" mapstructure:"http"`
}

// Hosts returns the addresses r listens on, for its certificate's hosts:
// raft, gRPC, peer and, when it has one, HTTP.
func (r ReplicaConfig) Hosts() []string {
	addrs := []string{r.Raft, r.GRPC, r.PeerAddr()}
	if r.HTTP != "" {
		addrs = append(addrs, r.HTTP)
	}
	return addrs
}

// PeerPortOffset is what a replica's peer port adds to its gRPC port when
// the configuration names no peer address.
const PeerPortOffset = 100

// PeerAddr returns the address of r's service between groups: Peer, or the
// gRPC address with its port + PeerPortOffset. It returns "" for a gRPC
// address that is not host:port (Validate refuses it).
func (r ReplicaConfig) PeerAddr() string {
	if r.Peer != "" {
		return r.Peer
	}
	host, port, err := net.SplitHostPort(r.GRPC)
	if err != nil {
		return ""
	}
	n, err := strconv.Atoi(port)
	if err != nil {
		return ""
	}
	return net.JoinHostPort(host, strconv.Itoa(n+PeerPortOffset))
}

// PartitionConfig is one key range [Start, End). Keys are given as text:
// the bytes of the (UTF-8) YAML string. End empty means no upper bound.
// A partition names its owner Group, or is Replicated and names none.
// (Named like GroupConfig and ReplicaConfig, after the file's sections.)
type PartitionConfig struct { //nolint:revive // partition.Config would not say which section it describes
	Name       string `yaml:"name" mapstructure:"name"`
	Start      string `yaml:"start" mapstructure:"start"`
	End        string `yaml:"end,omitempty" mapstructure:"end"`
	Group      string `yaml:"group,omitempty" mapstructure:"group"`
	Replicated bool   `yaml:"replicated,omitempty" mapstructure:"replicated"`
}

// NameMax is the length of the longest name of a group, replica or
// partition, in bytes. Names are made of lower-case ASCII letters, digits,
// '.', '_' and '-', and start with a letter or a digit: they appear in file
// names, log lines and metric labels as they are.
const NameMax = 64

// ReplicasMax is the largest number of replicas of a group. A group has an
// odd number of replicas, 1, 3 or 5 (DESIGN 0): raft with 2k replicas
// tolerates no more failures than with 2k-1.
const ReplicasMax = 5

// EpochReplicasMax is the largest number of replicas of a group in an
// epoch whose members changed (ClusterConfig.EpochMembers): the voters,
// and the learners on their way in.
const EpochReplicasMax = 16

// checkName returns an error unless s is a valid name; field is its place in
// the configuration.
func checkName(field, s string) error {
	valid := s != "" && len(s) <= NameMax
	for i := 0; valid && i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case (c == '.' || c == '_' || c == '-') && i > 0:
		default:
			valid = false
		}
	}
	if !valid {
		return fmt.Errorf("partition: %s: %s is not a valid name "+
			"(1 to %d lower-case letters, digits, '.', '_' or '-', starting with a letter or digit)", field, quoteKey([]byte(s)), NameMax)
	}
	return nil
}

// checkAddr returns an error unless s is host:port with a host and a port in
// 1..65535.
func checkAddr(field, s string) error {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("partition: %s: %q is not host:port: %w", field, s, err)
	}
	if host == "" {
		return fmt.Errorf("partition: %s: %q has no host (peers must be able to dial it)", field, s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("partition: %s: %q has port %q, want 1..65535", field, s, port)
	}
	return nil
}

// The values of ClusterConfig.Consistency.
const (
	ConsistencyStrict       = "strict-serializable"
	ConsistencySerializable = "serializable"
)

// Strict reports whether the cluster answers results in real-time order
// (ClusterConfig.Consistency).
func (c *ClusterConfig) Strict() bool { return c.Consistency != ConsistencySerializable }

// Validate checks c but for its protocol; it returns the first problem
// found, in the order of the fields, naming the field and its value. A
// configuration that Validate accepts builds. Validate reads no file:
// LoadLatency checks the matrix. The protocol and what it needs (a tree) are
// the registry's to check: protocol.Validate does both.
func (c *ClusterConfig) Validate() error {
	_, _, err := c.Build()
	return err
}

// Build validates c as Validate does and returns its topology (GroupIDs in
// overlay order) and its partition map. protocol.Build also checks the
// protocol.
func (c *ClusterConfig) Build() (*Topology, *PartitionMap, error) {
	switch c.Consistency {
	case "", ConsistencyStrict, ConsistencySerializable:
	default:
		return nil, nil, fmt.Errorf("partition: consistency %q: want %s (the default) or %s", c.Consistency, ConsistencyStrict, ConsistencySerializable)
	}
	groups, err := c.checkGroups()
	if err != nil {
		return nil, nil, err
	}
	order, err := c.overlayOrder(groups)
	if err != nil {
		return nil, nil, err
	}
	spec := Spec{Groups: make([]Group, len(order))}
	for rank, i := range order {
		g := c.Groups[i]
		spec.Groups[rank] = Group{Name: g.Name, Region: g.Region}
	}
	if len(c.Tree) > 0 {
		if err := c.checkTree(groups); err != nil {
			return nil, nil, err
		}
		spec.Parent = maps.Clone(c.Tree)
	}
	top, err := NewTopology(spec)
	if err != nil {
		// Names were checked above: what is left is the tree's shape (two
		// roots, a cycle), which NewTopology's error describes.
		return nil, nil, err
	}
	parts, err := c.partitions(top)
	if err != nil {
		return nil, nil, err
	}
	pm, err := NewPartitionMap(top, parts)
	if err != nil {
		// Its errors name partitions[i] as the configuration lists them.
		return nil, nil, err
	}
	return top, pm, nil
}

// checkGroups checks the groups and their replicas, and returns the index in
// c.Groups of each group name.
func (c *ClusterConfig) checkGroups() (map[string]int, error) {
	if len(c.Groups) == 0 {
		return nil, errors.New("partition: groups: none")
	}
	if len(c.Groups) > GroupsMax {
		return nil, fmt.Errorf("partition: groups: %d, more than GroupsMax (%d)", len(c.Groups), GroupsMax)
	}
	groups := make(map[string]int, len(c.Groups))
	replicas := make(map[string]string) // replica id -> its field
	addrs := make(map[string]string)    // address -> its field
	for i, g := range c.Groups {
		field := fmt.Sprintf("groups[%d]", i)
		if err := checkName(field+".name", g.Name); err != nil {
			return nil, err
		}
		if j, dup := groups[g.Name]; dup {
			return nil, fmt.Errorf("partition: %s.name: %q listed twice (also groups[%d])", field, g.Name, j)
		}
		groups[g.Name] = i
		n := len(g.Replicas)
		epochMembers := c.EpochMembers && n >= 1 && n <= EpochReplicasMax // any number
		if !epochMembers && (n == 0 || n > ReplicasMax || n%2 == 0) {
			return nil, fmt.Errorf("partition: %s.replicas: group %q has %d replicas, want an odd number from 1 to %d",
				field, g.Name, n, ReplicasMax)
		}
		for j, r := range g.Replicas {
			rfield := fmt.Sprintf("%s.replicas[%d]", field, j)
			if err := checkName(rfield+".id", r.ID); err != nil {
				return nil, err
			}
			if other, dup := replicas[r.ID]; dup {
				return nil, fmt.Errorf("partition: %s.id: %q listed twice (also %s; replica ids are unique in the cluster)",
					rfield, r.ID, other)
			}
			replicas[r.ID] = rfield
			if err := checkAddr(rfield+".grpc", r.GRPC); err != nil {
				return nil, err
			}
			peerField := rfield + ".peer"
			if r.Peer == "" {
				peerField += " (the grpc port + 100)"
			}
			listens := []struct{ field, addr string }{{rfield + ".raft", r.Raft}, {rfield + ".grpc", r.GRPC}, {peerField, r.PeerAddr()}}
			if r.HTTP != "" {
				listens = append(listens, struct{ field, addr string }{rfield + ".http", r.HTTP})
			}
			for _, a := range listens {
				if err := checkAddr(a.field, a.addr); err != nil {
					return nil, err
				}
				if other, dup := addrs[a.addr]; dup {
					return nil, fmt.Errorf("partition: %s: address %q already used by %s", a.field, a.addr, other)
				}
				addrs[a.addr] = a.field
			}
		}
	}
	return groups, nil
}

// overlayOrder returns the indexes in c.Groups of the groups in rank order.
func (c *ClusterConfig) overlayOrder(groups map[string]int) ([]int, error) {
	order := make([]int, 0, len(c.Groups))
	if len(c.Overlay) == 0 {
		for i := range c.Groups {
			order = append(order, i)
		}
		return order, nil
	}
	seen := make(map[string]int, len(c.Overlay))
	for k, name := range c.Overlay {
		i, ok := groups[name]
		if !ok {
			return nil, fmt.Errorf("partition: overlay[%d]: %q is not a group", k, name)
		}
		if j, dup := seen[name]; dup {
			return nil, fmt.Errorf("partition: overlay[%d]: %q listed twice (also overlay[%d])", k, name, j)
		}
		seen[name] = k
		order = append(order, i)
	}
	if len(order) != len(c.Groups) {
		var missing []string
		for _, g := range c.Groups {
			if _, ok := seen[g.Name]; !ok {
				missing = append(missing, strconv.Quote(g.Name))
			}
		}
		return nil, fmt.Errorf("partition: overlay: lists %d of the %d groups, want every group once (missing %s)",
			len(order), len(c.Groups), strings.Join(missing, ", "))
	}
	return order, nil
}

// checkTree checks that the tree names known groups, in sorted order so
// that a configuration with several errors always reports the same one.
func (c *ClusterConfig) checkTree(groups map[string]int) error {
	for _, child := range slices.Sorted(maps.Keys(c.Tree)) {
		parent := c.Tree[child]
		if _, ok := groups[child]; !ok {
			return fmt.Errorf("partition: tree: child %q is not a group", child)
		}
		if _, ok := groups[parent]; !ok {
			return fmt.Errorf("partition: tree.%s: parent %q is not a group", child, parent)
		}
		if parent == child {
			return fmt.Errorf("partition: tree.%s: %q is its own parent", child, parent)
		}
	}
	return nil
}

// partitions checks what NewPartitionMap cannot see (names, the group
// field) and converts c.Partitions, in their order.
func (c *ClusterConfig) partitions(top *Topology) ([]Partition, error) {
	if len(c.Partitions) == 0 {
		return nil, errors.New("partition: partitions: none")
	}
	parts := make([]Partition, len(c.Partitions))
	for i, p := range c.Partitions {
		field := fmt.Sprintf("partitions[%d]", i)
		if err := checkName(field+".name", p.Name); err != nil {
			return nil, err
		}
		part := Partition{Name: p.Name, Start: []byte(p.Start), Group: NoGroup, Replicated: p.Replicated}
		if p.End != "" {
			part.End = []byte(p.End)
		}
		switch {
		case p.Replicated && p.Group != "":
			return nil, fmt.Errorf("partition: %s.group: %q given for replicated partition %q, which every group owns",
				field, p.Group, p.Name)
		case !p.Replicated && p.Group == "":
			return nil, fmt.Errorf("partition: %s.group: missing for partition %q (give its owner, or replicated: true)",
				field, p.Name)
		case !p.Replicated:
			g, ok := top.Lookup(p.Group)
			if !ok {
				return nil, fmt.Errorf("partition: %s.group: %q is not a group", field, p.Group)
			}
			part.Group = g
		}
		parts[i] = part
	}
	return parts, nil
}

// Replica finds the replica whose id is id, and its group.
func (c *ClusterConfig) Replica(id string) (GroupConfig, ReplicaConfig, bool) {
	for _, g := range c.Groups {
		for _, r := range g.Replicas {
			if r.ID == id {
				return g, r, true
			}
		}
	}
	return GroupConfig{}, ReplicaConfig{}, false
}

// ReplicaIDs returns the id of every replica, in configuration order.
func (c *ClusterConfig) ReplicaIDs() []string {
	var ids []string
	for _, g := range c.Groups {
		for _, r := range g.Replicas {
			ids = append(ids, r.ID)
		}
	}
	return ids
}

// Endpoints returns the gRPC address of every replica, in configuration
// order: where clients reach the cluster.
func (c *ClusterConfig) Endpoints() []string {
	var addrs []string
	for _, g := range c.Groups {
		for _, r := range g.Replicas {
			addrs = append(addrs, r.GRPC)
		}
	}
	return addrs
}

// LatencyPath returns the path of the latency matrix for a configuration
// file in directory dir: Latency itself when absolute, else joined to dir.
// It returns "" when Latency is not set.
func (c *ClusterConfig) LatencyPath(dir string) string {
	if c.Latency == "" || filepath.IsAbs(c.Latency) {
		return c.Latency
	}
	return filepath.Join(dir, c.Latency)
}

// LoadLatency reads the latency matrix of a configuration file in directory
// dir (see LatencyPath) and checks that it has the region of every group. It
// returns nil and no error when Latency is not set.
func (c *ClusterConfig) LoadLatency(dir string) (*Latency, error) {
	path := c.LatencyPath(dir)
	if path == "" {
		return nil, nil
	}
	l, err := ReadLatencyFile(path)
	if err != nil {
		return nil, err
	}
	for i, g := range c.Groups {
		region := g.Region
		if region == "" {
			region = g.Name
		}
		if !l.Has(region) {
			return nil, fmt.Errorf("partition: groups[%d]: region %q of group %q is not in the latency matrix %s",
				i, region, g.Name, path)
		}
	}
	return l, nil
}
