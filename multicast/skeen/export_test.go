package skeen

import (
	"fmt"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// DescribeSend shows a send as the scripts print it: "relay c1.1", or
// "ts c1.1 2.B" for a proposal (clock 2, made unique by B's rank). It is
// exported for the scripts, which run in package skeen_test because the
// interaction environment imports group, and group imports the cores.
func DescribeSend(top *partition.Topology, s multicast.Send, name func(multicast.MsgID) string) string {
	env, err := decode(s.Payload, top.Len())
	if err != nil {
		return fmt.Sprintf("undecodable %s %s: %v", s.Kind, name(s.About), err)
	}
	if env.kind != s.Kind || env.msg.ID != s.About {
		return fmt.Sprintf("send labelled %s %s carries %s %s", s.Kind, name(s.About), env.kind, name(env.msg.ID))
	}
	if env.kind == multicast.KindTS {
		n := uint64(top.Len())
		return fmt.Sprintf("ts %s %d.%s", name(s.About), env.ts/n, top.Name(partition.GroupID(env.ts%n)))
	}
	return fmt.Sprintf("%s %s", s.Kind, name(s.About))
}

// CheckInvariants checks c's internal invariants (checkInvariants).
func CheckInvariants(c *Core) error { return c.checkInvariants() }
