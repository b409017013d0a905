package hosts

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
)

// Role is a replica's raft role as `flexkv status --json` reports it.
type Role struct {
	Group   string `json:"group"`
	Replica string `json:"replica"`
	Role    string `json:"role"` // leader, follower, candidate
	// Epoch is the epoch of the configuration the replica runs (DESIGN
	// 14); 0 when it did not say.
	Epoch uint64 `json:"epoch"`
}

// Roles asks every replica its role through the flexkv binary. A replica
// that does not answer (killed, cut off from the host) has no row.
func (c *Cluster) Roles() []Role {
	cmd := exec.Command(c.cfg.Binary, "status", "--json", "--config", c.ConfigPath, "--certs-dir", c.CertsDir, "--timeout", "2s")
	out, _ := cmd.Output() // exit code 1 when a replica is down: the rows still come
	var rows []Role
	for _, line := range strings.Split(string(out), "\n") {
		var r Role
		if json.Unmarshal([]byte(line), &r) == nil && r.Replica != "" {
			rows = append(rows, r)
		}
	}
	return rows
}

// Leader returns the replica that reports itself the leader of group g
// (from 0), or an error when none does.
func (c *Cluster) Leader(g int) (string, error) {
	if g < 0 || g >= c.cfg.Groups {
		return "", fmt.Errorf("hosts: no group %d", g)
	}
	for _, r := range c.Roles() {
		if r.Group == regionNames[g] && r.Role == "leader" {
			return r.Replica, nil
		}
	}
	return "", fmt.Errorf("hosts: no replica of %s reports itself leader", regionNames[g])
}
