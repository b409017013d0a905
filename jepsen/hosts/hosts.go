// Package hosts runs a FlexKV cluster on hosts made by the kernel (DESIGN
// 15): every replica is its own `flexkv server` process in its own network
// namespace with its own address, real TCP and mutual TLS between them,
// and its data on its own small tmpfs. Faults are the kernel's: SIGKILL and
// restart, a region's link set down and up (a real partition), or only what
// leaves the region dropped (a partition in one direction), a replica's
// disk filled. The cluster changes of DESIGN 14 are an operator's, made
// with the flexkv binary from the host: an overlay applied, a replica
// replaced on a new host (changes.go).
//
// The network: a router namespace holds one bridge per region (group); each
// replica's namespace has a veth pair to its region's bridge, and each
// bridge a veth pair to the router, which forwards between the regions
// (net.ipv4.ip_forward inside the router namespace only: the host's own
// setting is left alone). The host reaches the router over one more veth
// pair and a route to the cluster's /16, so that clients run in the test
// process. Cutting a region sets its bridge's link to the router down: its
// replicas still reach each other (raft in the group goes on), and nothing
// else reaches them. The kernel here has no netem: WAN delays stay in the
// servers' emulation (DESIGN 8).
//
// It needs root, iproute2 and tmpfs; Available says which is missing. Every
// namespace, link, mount and process a Cluster makes is removed by Close,
// whatever state Start or a test left it in; namespaces left by a process
// that died are removed by the next Start.
package hosts

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"go.yaml.in/yaml/v3"

	"github.com/flexkv/flexkv/certs"
	"github.com/flexkv/flexkv/partition"
)

// namePrefix begins the name of every namespace and host link a Cluster
// makes, followed by the process id of the test that made it.
const namePrefix = "fkvj"

// Ports every replica listens on, at its own address.
const (
	portRaft = 7100
	portGRPC = 7200
	portPeer = 7300
)

// regionNames are the groups' names (and regions), as configs/local.yaml.
var regionNames = []string{"eu-west-1", "eu-west-3", "eu-central-1", "us-east-1", "us-west-2"}

// Config describes a cluster to start.
type Config struct {
	// Binary is the flexkv binary (Build makes one).
	Binary string
	// Dir holds the certificates, the configuration, the logs and the
	// replicas' disks; it must exist and be empty.
	Dir string
	// Protocol is flexcast, skeen or tree.
	Protocol string
	// Groups is the number of groups, one region each (0: 3; at most 5);
	// Replicas the replicas of each (0: 3).
	Groups, Replicas int
	// DiskBytes is the size of each replica's tmpfs (0: 512 MiB).
	DiskBytes int64
	// Logf, when set, receives what the harness does.
	Logf func(format string, args ...any)
}

// Replica is one replica's host.
type Replica struct {
	ID, Group  string
	GroupIndex int    // from 0
	NS         string // its network namespace
	IP         string
	Disk       string // its tmpfs mount point
	DataDir    string // inside Disk
	Log        string // its stderr and stdout, across restarts
	// join: a replica added to the running cluster (AddHost), which
	// starts with --join, not with the configuration it is not in.
	join bool

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	removed bool // removed from its group (MemberRemove): never started again
}

// GRPC returns the replica's client API address.
func (r *Replica) GRPC() string { return net.JoinHostPort(r.IP, strconv.Itoa(portGRPC)) }

// Cluster is a running cluster of hosts.
type Cluster struct {
	cfg      Config
	tag      string // namePrefix + pid
	net16    int    // the second octet of the cluster's 10.x.0.0/16
	router   string // the router namespace
	Replicas []*Replica
	// ClusterConfig is the configuration the servers run, written to
	// ConfigPath; CertsDir holds the CA, the node certificates and user
	// root's client certificate.
	ClusterConfig *partition.ClusterConfig
	ConfigPath    string
	CertsDir      string

	mu     sync.Mutex
	undo   []func() error // what Close undoes, last made first
	closed bool
}

func (c *Cluster) logf(format string, args ...any) {
	if c.cfg.Logf != nil {
		c.cfg.Logf(format, args...)
	}
}

// Available returns nil if this machine can run a Cluster, else an error
// that names what is missing: root, the ip command, network namespaces,
// tmpfs.
func Available() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("hosts: needs root to make network namespaces and mounts (running as uid %d)", uid)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("hosts: needs iproute2: no `ip` command in PATH")
	}
	ns := fmt.Sprintf("%s%d-probe", namePrefix, os.Getpid())
	if out, err := run("ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("hosts: cannot make a network namespace (`ip netns add`): %w: %s", err, out)
	}
	if out, err := run("ip", "netns", "del", ns); err != nil {
		return fmt.Errorf("hosts: cannot remove network namespace %s: %w: %s", ns, err, out)
	}
	dir, err := os.MkdirTemp("", "fkvj-probe")
	if err != nil {
		return fmt.Errorf("hosts: %w", err)
	}
	defer os.Remove(dir)
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		return fmt.Errorf("hosts: cannot mount a tmpfs (a replica's disk): %w", err)
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		return fmt.Errorf("hosts: cannot unmount the probe tmpfs at %s: %w", dir, err)
	}
	return nil
}

// run runs a command and returns its combined output.
func run(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// ip runs one ip command.
func (c *Cluster) ip(args ...string) error {
	out, err := run("ip", args...)
	if err != nil {
		return fmt.Errorf("hosts: ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// Build builds the flexkv binary of the module at moduleDir into out.
func Build(ctx context.Context, moduleDir, out string) error {
	gobin := filepath.Join(goroot(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		gobin = "go"
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-o", out, "./cmd/flexkv")
	cmd.Dir = moduleDir
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("hosts: go build ./cmd/flexkv: %w: %s", err, bytes.TrimSpace(b))
	}
	return nil
}

func goroot() string {
	if r := os.Getenv("GOROOT"); r != "" {
		return r
	}
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "/usr/local/go"
	}
	return strings.TrimSpace(string(out))
}

// removeStale removes the namespaces and host links that clusters of
// processes no longer running left behind.
func removeStale() {
	out, _ := run("ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		pid, ok := stalePid(name)
		if ok && syscall.Kill(pid, 0) != nil {
			_, _ = run("ip", "netns", "del", name)
			_, _ = run("ip", "link", "del", namePrefix+strconv.Itoa(pid))
		}
	}
}

// stalePid returns the pid in a namespace name this package makes.
func stalePid(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0, false
	}
	digits, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(digits)
	return pid, err == nil && pid > 0
}

// clusterConfig builds the configuration of the replicas' addresses:
// every group owns two warehouses' partitions, as configs/local.yaml.
func (c *Cluster) clusterConfig() *partition.ClusterConfig {
	cc := &partition.ClusterConfig{Protocol: c.cfg.Protocol, Tree: map[string]string{}}
	for g := range c.cfg.Groups {
		name := regionNames[g]
		gc := partition.GroupConfig{Name: name, Region: name}
		for _, r := range c.Replicas {
			if r.GroupIndex == g {
				gc.Replicas = append(gc.Replicas, partition.ReplicaConfig{
					ID:   r.ID,
					Raft: net.JoinHostPort(r.IP, strconv.Itoa(portRaft)),
					GRPC: r.GRPC(),
					Peer: net.JoinHostPort(r.IP, strconv.Itoa(portPeer)),
				})
			}
		}
		cc.Groups = append(cc.Groups, gc)
		cc.Overlay = append(cc.Overlay, name)
		if g > 0 {
			cc.Tree[name] = regionNames[0]
		}
		for w := 2*g + 1; w <= 2*g+2; w++ {
			cc.Partitions = append(cc.Partitions, partition.PartitionConfig{
				Name: fmt.Sprintf("w%04d", w), Start: fmt.Sprintf("w/%04d/", w), End: fmt.Sprintf("w/%04d/", w+1), Group: name,
			})
		}
	}
	return cc
}

// Prefixes returns a key prefix of each group's first partition.
func (c *Cluster) Prefixes() []string {
	var out []string
	for g := range c.cfg.Groups {
		out = append(out, fmt.Sprintf("w/%04d/", 2*g+1))
	}
	return out
}

// Endpoints returns every replica's client API address.
func (c *Cluster) Endpoints() []string {
	var out []string
	for _, r := range c.Replicas {
		out = append(out, r.GRPC())
	}
	return out
}

// Replica returns the replica of id.
func (c *Cluster) Replica(id string) (*Replica, error) {
	for _, r := range c.Replicas {
		if r.ID == id {
			return r, nil
		}
	}
	return nil, fmt.Errorf("hosts: no replica %q", id)
}

// GroupName returns the name of group g (from 0).
func GroupName(g int) string { return regionNames[g] }

func (c *Cluster) writeConfig() error {
	c.ClusterConfig = c.clusterConfig()
	if err := c.ClusterConfig.Validate(); err != nil {
		return fmt.Errorf("hosts: the generated configuration: %w", err)
	}
	b, err := yaml.Marshal(c.ClusterConfig)
	if err != nil {
		return err
	}
	c.ConfigPath = filepath.Join(c.cfg.Dir, "cluster.yaml")
	header := "# generated by the host harness (jepsen/hosts): one namespace per replica\n"
	return os.WriteFile(c.ConfigPath, append([]byte(header), b...), 0o644)
}

func (c *Cluster) writeCerts() error {
	c.CertsDir = filepath.Join(c.cfg.Dir, "certs")
	var nodes []certs.NodeSpec
	for _, r := range c.Replicas {
		nodes = append(nodes, certs.NodeSpec{ID: certs.NodeID{Group: r.Group, Replica: r.ID}, Hosts: []string{r.IP}})
	}
	_, err := certs.EnsureCluster(c.CertsDir, filepath.Join(c.cfg.Dir, "ca.key"), nodes, []string{"root"})
	return err
}
