package interaction

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cockroachdb/datadriven"

	"github.com/flexkv/flexkv/multicast/channel"
	"github.com/flexkv/flexkv/partition"
)

// newFromArgs builds the environment of a new command: the topology, the
// protocol and the channel bounds it names; the protocol gets the rest.
func newFromArgs(d *datadriven.TestData, protos []Protocol) (*Env, error) {
	var spec partition.Spec
	chcfg := channel.Config{ResendTicks: ResendTicksDefault, HoldbackMax: HoldbackMaxDefault, OutboxMax: OutboxMaxDefault}
	var rest Args
	var proto *Protocol
	if len(protos) == 1 {
		proto = &protos[0]
	}
	for _, a := range d.CmdArgs {
		vals := splitVals(a)
		switch a.Key {
		case "groups":
			if n, err := strconv.Atoi(single(a)); err == nil && len(vals) == 1 {
				if n < 1 || n > len(groupLetters) {
					return nil, fmt.Errorf("groups=%d out of range", n)
				}
				vals = strings.Split(groupLetters[:n], "")
			}
			for _, v := range vals {
				spec.Groups = append(spec.Groups, partition.Group{Name: v})
			}
		case "parent":
			spec.Parent = map[string]string{}
			for _, v := range vals {
				child, parent, ok := strings.Cut(v, ":")
				if !ok {
					return nil, fmt.Errorf("parent %q: want child:parent", v)
				}
				spec.Parent[child] = parent
			}
		case "protocol":
			proto = nil
			for i := range protos {
				if protos[i].Name == single(a) {
					proto = &protos[i]
				}
			}
			if proto == nil {
				return nil, fmt.Errorf("unknown protocol %q", single(a))
			}
		case "resend-ticks", "holdback-max", "outbox-max":
			n, err := strconv.Atoi(single(a))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.Key, err)
			}
			switch a.Key {
			case "resend-ticks":
				chcfg.ResendTicks = n
			case "holdback-max":
				chcfg.HoldbackMax = n
			default:
				chcfg.OutboxMax = n
			}
		default:
			rest = append(rest, a)
		}
	}
	if proto == nil {
		return nil, fmt.Errorf("new: protocol= required")
	}
	top, err := partition.NewTopology(spec)
	if err != nil {
		return nil, err
	}
	return NewEnv(*proto, top, rest, chcfg)
}
