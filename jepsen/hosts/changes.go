package hosts

// The cluster changes of DESIGN 14, made through the flexkv binary as an
// operator makes them: an overlay change, and a member added, promoted
// and removed on hosts the harness makes for it.

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ApplyOverlay changes the running cluster's overlay (DESIGN 14) with
// `flexkv overlay apply`, as an operator does: order names every group
// once, lowest rank first; tree, when not empty, gives the tree protocol's
// parent of every group but the root. The command asks a replica for the
// current epoch's overlay and sends the change to that epoch's change
// entry, retrying across leader changes for up to timeout. It returns the
// epoch the change started.
func (c *Cluster) ApplyOverlay(order []string, tree map[string]string, timeout time.Duration) (uint64, error) {
	args := []string{"overlay", "apply", strings.Join(order, ","), "--json",
		"--config", c.ConfigPath, "--certs-dir", c.CertsDir, "--timeout", timeout.String()}
	if len(tree) > 0 {
		var edges []string
		for _, child := range slices.Sorted(maps.Keys(tree)) {
			edges = append(edges, child+"="+tree[child])
		}
		args = append(args, "--tree", strings.Join(edges, ","))
	}
	out, err := c.flexkv(args...)
	if err != nil {
		return 0, err
	}
	var resp struct {
		Epoch   uint64   `json:"epoch"`
		Overlay []string `json:"overlay"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &resp); err != nil || resp.Epoch == 0 {
		return 0, fmt.Errorf("hosts: flexkv overlay apply printed %q, want {\"epoch\":N,...}", strings.TrimSpace(out))
	}
	if !slices.Equal(resp.Overlay, order) {
		return 0, fmt.Errorf("hosts: flexkv overlay apply took overlay %s, asked %s", strings.Join(resp.Overlay, ","), strings.Join(order, ","))
	}
	return resp.Epoch, nil
}

// WaitEpoch waits until every running replica reports epoch at least e, or
// limit passes; it returns how many replicas report it and how many run.
func (c *Cluster) WaitEpoch(e uint64, limit time.Duration) (at, running int) {
	deadline := time.Now().Add(limit)
	for {
		at, running = 0, 0
		epochs := map[string]uint64{}
		for _, r := range c.Roles() {
			epochs[r.Replica] = r.Epoch
		}
		for _, r := range c.Replicas {
			if !c.Running(r.ID) {
				continue
			}
			running++
			if epochs[r.ID] >= e {
				at++
			}
		}
		if at == running || time.Now().After(deadline) {
			return at, running
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Members returns the ids of group g's (from 0) replicas that have not
// been removed from the cluster, as the harness made them.
func (c *Cluster) Members(g int) []string {
	var out []string
	for _, r := range c.Replicas {
		if r.GroupIndex == g && !r.isRemoved() {
			out = append(out, r.ID)
		}
	}
	return out
}

func (r *Replica) isRemoved() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed
}

// AddHost makes the host of a new replica of group g (from 0), as an
// operator provisions a machine to replace one: its namespace on the
// region's bridge with the region's next address, its disk, and its node
// certificate for that address (`flexkv cert create-node ID IP --group`).
// The replica is not a member until MemberAdd, and not running until
// Restart, which starts it with --join. It appends to Replicas: call it
// while no other goroutine uses the Cluster's replicas.
func (c *Cluster) AddHost(g int) (*Replica, error) {
	if g < 0 || g >= c.cfg.Groups {
		return nil, fmt.Errorf("hosts: no group %d", g)
	}
	j := 0
	for _, r := range c.Replicas {
		if r.GroupIndex == g {
			j++
		}
	}
	if 11+j > 250 {
		return nil, fmt.Errorf("hosts: group %s has had %d replicas: no address left", regionNames[g], j)
	}
	id := "r" + strconv.Itoa(len(c.Replicas)+1)
	disk := filepath.Join(c.cfg.Dir, "disk", id)
	r := &Replica{
		ID: id, Group: regionNames[g], GroupIndex: g, NS: c.tag + "-" + id,
		IP:   c.addr(g+1, 11+j),
		Disk: disk, DataDir: filepath.Join(disk, "data"),
		Log:  filepath.Join(c.cfg.Dir, "logs", id+".log"),
		join: true,
	}
	if err := c.makeHost(r); err != nil {
		return nil, err
	}
	if _, err := c.flexkv("cert", "create-node", id, r.IP, "--group", r.Group, "--config", c.ConfigPath,
		"--certs-dir", c.CertsDir, "--ca-key", filepath.Join(c.cfg.Dir, "ca.key")); err != nil {
		return nil, err
	}
	c.Replicas = append(c.Replicas, r)
	c.logf("hosts: host of %s made (%s, %s)", id, r.Group, r.IP)
	return r, nil
}

// MemberAdd adds replica id, whose host AddHost made, to its group as a
// learner (`flexkv member add`), and returns the epoch that started. The
// command returns once the change entry took the change; MemberAdd then
// waits (up to joinEpochWait) until every running replica has started the
// epoch, since the new replica fetches its configuration from one of them
// at its start (--join) and is refused by one that has not.
func (c *Cluster) MemberAdd(id string) (uint64, error) {
	r, err := c.Replica(id)
	if err != nil {
		return 0, err
	}
	out, err := c.flexkv(c.memberArgs("add", r.Group, id, 30*time.Second,
		"--raft", net.JoinHostPort(r.IP, strconv.Itoa(portRaft)), "--grpc", r.GRPC(),
		"--peer", net.JoinHostPort(r.IP, strconv.Itoa(portPeer)))...)
	if err != nil {
		return 0, err
	}
	epoch, err := epochOf(out)
	if err != nil {
		return 0, err
	}
	if at, running := c.WaitEpoch(epoch, joinEpochWait); at < running {
		c.logf("hosts: %d of %d running replicas at epoch %d after %v", at, running, epoch, joinEpochWait)
	}
	return epoch, nil
}

// joinEpochWait bounds MemberAdd's wait for the replicas to start the
// epoch of the add.
const joinEpochWait = 10 * time.Second

// MemberPromote makes the learner id a voter once it has caught up
// (`flexkv member promote --wait`), waiting up to limit.
func (c *Cluster) MemberPromote(id string, limit time.Duration) error {
	r, err := c.Replica(id)
	if err != nil {
		return err
	}
	_, err = c.flexkv(c.memberArgs("promote", r.Group, id, limit, "--wait")...)
	return err
}

// MemberRemove removes replica id from its group (`flexkv member
// remove`), returns the epoch that started, and marks the replica removed:
// Members leaves it out, and it is never started again. Its process, if
// it runs, is left to the caller (Kill).
func (c *Cluster) MemberRemove(id string) (uint64, error) {
	r, err := c.Replica(id)
	if err != nil {
		return 0, err
	}
	out, err := c.flexkv(c.memberArgs("remove", r.Group, id, 30*time.Second)...)
	if err != nil {
		return 0, err
	}
	r.mu.Lock()
	r.removed = true
	r.mu.Unlock()
	return epochOf(out)
}

// MovePartition moves partition part to group to as an operator does
// (DESIGN 14: `flexkv partition move --wait`) and returns the epoch at
// which group to owns it.
func (c *Cluster) MovePartition(part, to string, timeout time.Duration) (uint64, error) {
	out, err := c.flexkv("partition", "move", part, "--to", to, "--wait", "--json",
		"--config", c.ConfigPath, "--certs-dir", c.CertsDir, "--timeout", timeout.String())
	if err != nil {
		return 0, err
	}
	return epochOf(out)
}

func (c *Cluster) memberArgs(op, group, id string, timeout time.Duration, more ...string) []string {
	args := []string{"member", op, group, id, "--json", "--config", c.ConfigPath, "--certs-dir", c.CertsDir, "--timeout", timeout.String()}
	return append(args, more...)
}

// flexkv runs the flexkv binary from the host and returns its standard
// output; an error carries the command and what it printed.
func (c *Cluster) flexkv(args ...string) (string, error) {
	c.logf("hosts: flexkv %s", strings.Join(args[:min(len(args), 4)], " "))
	cmd := exec.Command(c.cfg.Binary, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hosts: flexkv %s: %w: %s%s", strings.Join(args, " "), err, strings.TrimSpace(string(out)), strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}

// epochOf reads the epoch of a command's --json object.
func epochOf(out string) (uint64, error) {
	var resp struct {
		Epoch uint64 `json:"epoch"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &resp); err != nil || resp.Epoch == 0 {
		return 0, fmt.Errorf("hosts: printed %q, want {\"epoch\":N,...}", strings.TrimSpace(out))
	}
	return resp.Epoch, nil
}

// joinEndpoint returns the client API address a joining replica r fetches
// the cluster's configuration from: a running member's other than r,
// of another group where one runs (a fault of r's group leaves it).
func (c *Cluster) joinEndpoint(r *Replica) (string, error) {
	var same string
	for _, o := range c.Replicas {
		if o == r || o.isRemoved() || !c.Running(o.ID) {
			continue
		}
		if o.GroupIndex != r.GroupIndex {
			return o.GRPC(), nil
		}
		if same == "" {
			same = o.GRPC()
		}
	}
	if same == "" {
		return "", fmt.Errorf("hosts: %s joins: no running member to join through", r.ID)
	}
	return same, nil
}
