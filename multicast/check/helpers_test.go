package check

import (
	"fmt"
	"strings"
)

// parseScript turns a small text notation into log records, one line each:
//
//	multicast m1 A C        m1 multicast to groups A and C
//	deliver A m1 m2         replica r1 of A delivers m1 then m2
//	deliver A/r2 m1         replica r2 of A delivers m1
//	deliver A m1=A,B        dst written on the deliver line: A, B
//	send A B ack m1         A sends an ack about m1 to B (10 bytes)
//
// A deliver line without "=" uses the dst of the id's multicast line, or the
// delivering group alone for an id not multicast (yet).
func parseScript(text string) ([]Record, error) {
	var recs []Record
	dst := map[string][]string{}
	for n, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		bad := fmt.Errorf("script line %d: %q", n+1, line)
		switch f[0] {
		case "multicast":
			if len(f) < 3 {
				return nil, bad
			}
			dst[f[1]] = f[2:]
			recs = append(recs, Record{Ev: EvMulticast, ID: f[1], Dst: f[2:]})
		case "deliver":
			if len(f) < 3 {
				return nil, bad
			}
			group, replica, ok := strings.Cut(f[1], "/")
			if !ok {
				replica = "r1"
			}
			for _, tok := range f[2:] {
				id, list, explicit := strings.Cut(tok, "=")
				d := dst[id]
				if explicit {
					d = strings.Split(list, ",")
				} else if d == nil {
					d = []string{group}
				}
				recs = append(recs, Record{Ev: EvDeliver, Group: group, Replica: replica, ID: id, Dst: d})
			}
		case "send":
			if len(f) != 5 {
				return nil, bad
			}
			recs = append(recs, Record{Ev: EvSend, From: f[1], To: f[2], Kind: f[3], About: f[4], Bytes: 10})
		default:
			return nil, bad
		}
	}
	return recs, nil
}
