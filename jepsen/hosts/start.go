package hosts

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Start makes the hosts and starts every replica. On an error it removes
// what it made. Close the Cluster to remove everything.
func Start(ctx context.Context, cfg Config) (*Cluster, error) {
	if cfg.Groups <= 0 {
		cfg.Groups = 3
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 3
	}
	if cfg.DiskBytes <= 0 {
		cfg.DiskBytes = 512 << 20
	}
	switch {
	case cfg.Groups > len(regionNames):
		return nil, fmt.Errorf("hosts: %d groups: at most %d", cfg.Groups, len(regionNames))
	case cfg.Replicas > 9:
		return nil, fmt.Errorf("hosts: %d replicas a group: at most 9", cfg.Replicas)
	case cfg.Binary == "" || cfg.Dir == "":
		return nil, errors.New("hosts: Config.Binary and Config.Dir are required")
	}
	if err := Available(); err != nil {
		return nil, err
	}
	removeStale()
	pid := os.Getpid()
	net16, err := freeNet(pid)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, tag: namePrefix + strconv.Itoa(pid), net16: net16}
	c.router = c.tag + "-rt"
	n := 0
	for g := range cfg.Groups {
		for j := range cfg.Replicas {
			n++
			id := "r" + strconv.Itoa(n)
			disk := filepath.Join(cfg.Dir, "disk", id)
			c.Replicas = append(c.Replicas, &Replica{
				ID: id, Group: regionNames[g], GroupIndex: g, NS: c.tag + "-" + id,
				IP:   fmt.Sprintf("10.%d.%d.%d", c.net16, g+1, 11+j),
				Disk: disk, DataDir: filepath.Join(disk, "data"),
				Log: filepath.Join(cfg.Dir, "logs", id+".log"),
			})
		}
	}
	if err := c.build(ctx); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

func (c *Cluster) build(ctx context.Context) error {
	if err := os.MkdirAll(filepath.Join(c.cfg.Dir, "logs"), 0o755); err != nil {
		return err
	}
	if err := c.writeCerts(); err != nil {
		return err
	}
	if err := c.writeConfig(); err != nil {
		return err
	}
	if err := c.makeRouter(); err != nil {
		return err
	}
	for _, r := range c.Replicas {
		if err := c.makeHost(r); err != nil {
			return err
		}
	}
	for _, r := range c.Replicas {
		if err := c.Restart(r.ID); err != nil {
			return err
		}
	}
	return c.WaitServing(ctx, 60*time.Second)
}

// freeNet returns x such that no address or route of the host is in
// 10.x.0.0/16, trying from 100 + pid%100.
func freeNet(pid int) (int, error) {
	addrs, _ := run("ip", "-o", "addr")
	routes, _ := run("ip", "route")
	for i := range 100 {
		x := 100 + (pid+i)%100
		p := fmt.Sprintf(" 10.%d.", x)
		if !strings.Contains(addrs, p) && !strings.Contains(" "+routes, p) {
			return x, nil
		}
	}
	return 0, errors.New("hosts: every 10.100.0.0/16 to 10.199.0.0/16 is in use on this host")
}

// made records how to undo something just made.
func (c *Cluster) made(undo func() error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.undo = append(c.undo, undo)
}

// makeRouter makes the router namespace, the regions' bridges and the
// host's link to the router.
func (c *Cluster) makeRouter() error {
	if err := c.ip("netns", "add", c.router); err != nil {
		return err
	}
	c.made(func() error { return c.ip("netns", "del", c.router) })
	host := c.tag // the host's end of its link to the router
	steps := [][]string{
		{"-n", c.router, "link", "set", "lo", "up"},
		{"link", "add", host, "type", "veth", "peer", "name", "uplink", "netns", c.router},
	}
	if err := c.ips(steps); err != nil {
		return err
	}
	c.made(func() error { return c.ipGone("link", "del", host) })
	steps = [][]string{
		{"addr", "add", c.addr(255, 1) + "/30", "dev", host},
		{"link", "set", host, "up"},
		{"-n", c.router, "addr", "add", c.addr(255, 2) + "/30", "dev", "uplink"},
		{"-n", c.router, "link", "set", "uplink", "up"},
		{"route", "add", fmt.Sprintf("10.%d.0.0/16", c.net16), "via", c.addr(255, 2)},
	}
	for g := range c.cfg.Groups {
		br, gw, port := "br"+strconv.Itoa(g), "gw"+strconv.Itoa(g), "gwp"+strconv.Itoa(g)
		steps = append(steps,
			[]string{"-n", c.router, "link", "add", br, "type", "bridge"},
			[]string{"-n", c.router, "link", "set", br, "up"},
			[]string{"-n", c.router, "link", "add", gw, "type", "veth", "peer", "name", port},
			[]string{"-n", c.router, "link", "set", port, "master", br},
			[]string{"-n", c.router, "link", "set", port, "up"},
			[]string{"-n", c.router, "addr", "add", c.addr(g+1, 254) + "/24", "dev", gw},
			[]string{"-n", c.router, "link", "set", gw, "up"},
		)
	}
	if err := c.ips(steps); err != nil {
		return err
	}
	return c.forward()
}

// forward turns on forwarding inside the router namespace only, and makes
// it answer ARP only on the link that holds the address asked for: else a
// region's bridge, which has no address of its own, would answer for its
// gateway's, and the region's packets would enter the router through the
// bridge, past the rules and links that cut the region.
func (c *Cluster) forward() error {
	out, err := run("ip", "netns", "exec", c.router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.arp_ignore=1")
	if err != nil {
		return fmt.Errorf("hosts: forwarding in %s: %w: %s", c.router, err, out)
	}
	return nil
}

// makeHost makes replica r's namespace, its link to its region's bridge
// and its disk.
func (c *Cluster) makeHost(r *Replica) error {
	if err := c.ip("netns", "add", r.NS); err != nil {
		return err
	}
	c.made(func() error { return c.ip("netns", "del", r.NS) })
	g := strconv.Itoa(r.GroupIndex)
	port := "v" + r.ID
	steps := [][]string{
		{"-n", r.NS, "link", "set", "lo", "up"},
		{"-n", c.router, "link", "add", port, "type", "veth", "peer", "name", "eth0", "netns", r.NS},
		{"-n", c.router, "link", "set", port, "master", "br" + g},
		{"-n", c.router, "link", "set", port, "up"},
		{"-n", r.NS, "addr", "add", r.IP + "/24", "dev", "eth0"},
		{"-n", r.NS, "link", "set", "eth0", "up"},
		{"-n", r.NS, "route", "add", "default", "via", c.addr(r.GroupIndex+1, 254)},
	}
	if err := c.ips(steps); err != nil {
		return err
	}
	if err := os.MkdirAll(r.Disk, 0o755); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", r.Disk, "tmpfs", 0, "size="+strconv.FormatInt(c.cfg.DiskBytes, 10)); err != nil {
		return fmt.Errorf("hosts: mount a tmpfs at %s: %w", r.Disk, err)
	}
	c.made(func() error { return unmount(r.Disk) })
	return os.MkdirAll(r.DataDir, 0o755)
}

// unmount unmounts a replica's disk, lazily if it is busy.
func unmount(dir string) error {
	if err := syscall.Unmount(dir, 0); err != nil {
		if err2 := syscall.Unmount(dir, syscall.MNT_DETACH); err2 != nil {
			return fmt.Errorf("hosts: unmount %s: %w", dir, err)
		}
	}
	return nil
}

func (c *Cluster) ips(steps [][]string) error {
	for _, s := range steps {
		if err := c.ip(s...); err != nil {
			return err
		}
	}
	return nil
}

// ipGone runs an ip command that removes something, which may be gone
// already (a link removed with its namespace).
func (c *Cluster) ipGone(args ...string) error {
	out, err := run("ip", args...)
	if err != nil && !containsAny(out, "Cannot find device", "No such file", "does not exist") {
		return fmt.Errorf("hosts: ip %v: %w: %s", args, err, out)
	}
	return nil
}

// addr returns 10.<net16>.<third>.<fourth>.
func (c *Cluster) addr(third, fourth int) string {
	return fmt.Sprintf("10.%d.%d.%d", c.net16, third, fourth)
}

// Close stops every process and removes every namespace, link and mount,
// last made first. It may be called more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	var errs []error
	for _, r := range c.Replicas {
		errs = append(errs, r.kill())
	}
	c.mu.Lock()
	undo := c.undo
	c.undo = nil
	c.mu.Unlock()
	for i := len(undo) - 1; i >= 0; i-- {
		errs = append(errs, undo[i]())
	}
	return errors.Join(errs...)
}
