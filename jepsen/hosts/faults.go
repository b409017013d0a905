package hosts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Restart starts replica id's server in its namespace (it must not be
// running): the same data directory, so a restart after a kill recovers
// from what its disk holds.
func (c *Cluster) Restart(id string) error {
	r, err := c.Replica(id)
	if err != nil {
		return err
	}
	// A replica added to the running cluster fetches the configuration
	// of the current epoch from a member, at every start (flexkv server
	// --join); the others run the configuration file.
	source := []string{"--config", c.ConfigPath}
	if r.join {
		endpoint, err := c.joinEndpoint(r)
		if err != nil {
			return err
		}
		source = []string{"--join", endpoint, "--initial-cluster-state", "existing"}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.cmd != nil:
		return fmt.Errorf("hosts: %s is running", id)
	case r.removed:
		return fmt.Errorf("hosts: %s was removed from its group", id)
	}
	log, err := os.OpenFile(r.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child holds its own copy
	fmt.Fprintf(log, "--- hosts: start at %s\n", time.Now().Format(time.RFC3339Nano))
	args := append([]string{"netns", "exec", r.NS, c.cfg.Binary, "server"}, source...)
	args = append(args, "--node", r.ID, "--data-dir", r.DataDir, "--certs-dir", c.CertsDir, "--log-level", "warn")
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = log, log
	// ip netns exec execs the server: the pid is the server's. It dies
	// with the test process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("hosts: start %s: %w", id, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	r.cmd, r.exited = cmd, exited
	c.logf("hosts: started %s (%s, pid %d)", id, r.IP, cmd.Process.Pid)
	return nil
}

// Kill sends SIGKILL to replica id's server and waits until it is gone.
func (c *Cluster) Kill(id string) error {
	r, err := c.Replica(id)
	if err != nil {
		return err
	}
	c.logf("hosts: SIGKILL %s", id)
	return r.kill()
}

func (r *Replica) kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return nil
	}
	err := r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd, r.exited = nil, nil
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("hosts: kill %s: %w", r.ID, err)
	}
	return nil
}

// Pause stops replica id's server (SIGSTOP) as a process stalls on a
// machine that froze, or resumes it (SIGCONT): whatever its peers and
// clients send meanwhile waits in its sockets.
func (c *Cluster) Pause(id string, paused bool) error {
	r, err := c.Replica(id)
	if err != nil {
		return err
	}
	sig, name := syscall.SIGCONT, "SIGCONT"
	if paused {
		sig, name = syscall.SIGSTOP, "SIGSTOP"
	}
	c.logf("hosts: %s %s", name, id)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return fmt.Errorf("hosts: %s %s: not running", name, id)
	}
	if err := r.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("hosts: %s %s: %w", name, id, err)
	}
	return nil
}

// Running reports whether replica id's server process is alive.
func (c *Cluster) Running(id string) bool {
	r, err := c.Replica(id)
	if err != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.exited:
		return false
	default:
		return true
	}
}

// Reap forgets replica id's process if it exited by itself (a disk full
// may end it), so that Restart can start it; it reports whether it had.
func (c *Cluster) Reap(id string) bool {
	r, err := c.Replica(id)
	if err != nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false
	}
	select {
	case <-r.exited:
		r.cmd, r.exited = nil, nil
		return true
	default:
		return false
	}
}

// WaitServing waits until every replica not removed from its group
// accepts TCP connections on its client API, from the host, through the
// router.
func (c *Cluster) WaitServing(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, r := range c.Replicas {
		if r.isRemoved() {
			continue
		}
		for {
			conn, err := net.DialTimeout("tcp", r.GRPC(), time.Second)
			if err == nil {
				conn.Close()
				break
			}
			if !c.Running(r.ID) {
				return fmt.Errorf("hosts: %s exited: %s", r.ID, tail(r.Log))
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				return fmt.Errorf("hosts: %s does not accept connections at %s after %v: %w", r.ID, r.GRPC(), limit, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return nil
}

// tail returns the end of a log file.
func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return strings.TrimSpace(string(b))
}

// CutRegion sets group g's region's link to the router down (cut) or up:
// its replicas reach each other and nothing else, in both directions.
func (c *Cluster) CutRegion(g int, cut bool) error {
	if g < 0 || g >= c.cfg.Groups {
		return fmt.Errorf("hosts: no group %d", g)
	}
	state := "up"
	if cut {
		state = "down"
	}
	c.logf("hosts: region %s link %s", regionNames[g], state)
	return c.ip("-n", c.router, "link", "set", "gw"+strconv.Itoa(g), state)
}

// CutRegionOutbound drops (cut) or forwards again every packet group g's
// region sends out of it, at the router (an ip rule that blackholes what
// arrives from the region's link): a partition in one direction. What is
// sent to the region still arrives; its answers do not leave.
func (c *Cluster) CutRegionOutbound(g int, cut bool) error {
	if g < 0 || g >= c.cfg.Groups {
		return fmt.Errorf("hosts: no group %d", g)
	}
	op := "del"
	if cut {
		op = "add"
	}
	c.logf("hosts: region %s outbound %s", regionNames[g], map[bool]string{true: "dropped", false: "forwarded"}[cut])
	return c.ip("-n", c.router, "rule", op, "iif", "gw"+strconv.Itoa(g), "blackhole")
}

// CutRegionPeers drops (cut) or forwards again every packet, in either
// direction, between group g's region and the other regions' that goes to
// or comes from a peer port: the channels between groups (DESIGN 4) stop,
// while clients still reach the region and its raft, inside its bridge,
// goes on. This is the outage of the inter-region links alone, as
// `iptables -j DROP` on the group's peer ports makes it (blackhole rules
// at the router, which drop without an answer).
func (c *Cluster) CutRegionPeers(g int, cut bool) error {
	if g < 0 || g >= c.cfg.Groups {
		return fmt.Errorf("hosts: no group %d", g)
	}
	op := "del"
	if cut {
		op = "add"
	}
	c.logf("hosts: region %s peer traffic %s", regionNames[g], map[bool]string{true: "dropped", false: "forwarded"}[cut])
	port := strconv.Itoa(portPeer)
	region := c.addr(g+1, 0) + "/24"
	var errs []error
	for _, sel := range [][]string{{"iif", "gw" + strconv.Itoa(g)}, {"to", region}} {
		for _, dir := range []string{"dport", "sport"} {
			args := append([]string{"-n", c.router, "rule", op}, sel...)
			args = append(args, "ipproto", "tcp", dir, port, "blackhole")
			// Healing removes every rule even when one is missing.
			if err := c.ip(args...); err != nil {
				if cut {
					return err
				}
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// fillName is the file that fills a replica's disk, beside its data.
const fillName = "fill"

// FillDisk fills replica id's disk (its tmpfs) until a write fails with
// ENOSPC: every later write of the replica fails as on a full disk.
func (c *Cluster) FillDisk(id string) error {
	r, err := c.Replica(id)
	if err != nil {
		return err
	}
	f, err := os.OpenFile(filepath.Join(r.Disk, fillName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	chunk := make([]byte, 1<<20)
	for {
		if _, err := f.Write(chunk); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			return fmt.Errorf("hosts: fill %s's disk: %w", id, err)
		}
	}
	// The last bytes: fill what a whole chunk did not.
	for _, n := range []int{64 << 10, 4 << 10, 512, 1} {
		for {
			if _, err := f.Write(chunk[:n]); err != nil {
				break
			}
		}
	}
	c.logf("hosts: %s's disk is full", id)
	return nil
}

// FreeDisk removes what FillDisk wrote.
func (c *Cluster) FreeDisk(id string) error {
	r, err := c.Replica(id)
	if err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(r.Disk, fillName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	c.logf("hosts: %s's disk has room again", id)
	return nil
}

// DiskFree returns the bytes free on replica id's disk.
func (c *Cluster) DiskFree(id string) (int64, error) {
	r, err := c.Replica(id)
	if err != nil {
		return 0, err
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(r.Disk, &st); err != nil {
		return 0, err
	}
	return int64(st.Bavail) * st.Bsize, nil
}

// Resources lists what the cluster made that the kernel holds: its
// namespaces, its host link and its mounts, for a test that checks that
// Close left nothing.
func (c *Cluster) Resources() (namespaces, links, mounts []string) {
	out, _ := run("ip", "netns", "list")
	for _, line := range strings.Split(out, "\n") {
		if name, _, _ := strings.Cut(strings.TrimSpace(line), " "); strings.HasPrefix(name, c.tag+"-") {
			namespaces = append(namespaces, name)
		}
	}
	if _, err := net.InterfaceByName(c.tag); err == nil {
		links = append(links, c.tag)
	}
	f, err := os.Open("/proc/self/mounts")
	if err == nil {
		defer f.Close()
		b, _ := io.ReadAll(f)
		for _, line := range strings.Split(string(b), "\n") {
			if fields := strings.Fields(line); len(fields) > 1 && strings.HasPrefix(fields[1], c.cfg.Dir) {
				mounts = append(mounts, fields[1])
			}
		}
	}
	return namespaces, links, mounts
}

func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
