//go:build invariants

package channel

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/internal/invariants"
)

// Under the invariants tag every input checks the state it leaves, and a
// snapshot is restored and encoded again: a state broken in memory panics
// at the next input, naming the invariant.
func TestInvariantsFire(t *testing.T) {
	for _, tt := range []struct {
		name, want string
		breakIt    func(c *Channel)
		input      func(c *Channel)
	}{
		{"outbox bytes miscounted", "outbox bytes", func(c *Channel) { c.links[1].outboxBytes++ },
			func(c *Channel) { c.Tick() }},
		{"outbox out of order", "envelope ends at byte", func(c *Channel) { c.links[1].outbox[0].end = c.sentBytes + 5 },
			func(c *Channel) { c.Send(2, []byte("z")) }},
		{"receive position ahead of a held frame", "out of order or window", func(c *Channel) { c.links[2].recv = 5 },
			func(c *Channel) { _ = c.Receive(ctl(2, 0, 0, 0)) }},
		{"hold-back beyond its bound", "held back", func(c *Channel) {
			c.links[2].holdback = append(c.links[2].holdback, held{seq: 4}, held{seq: 5}, held{seq: 6}, held{seq: 7})
		}, func(c *Channel) { c.Tick() }},
		{"resend timer past its bound", "does not restore", func(c *Channel) { c.links[1].idle = c.cfg.ResendTicks },
			func(c *Channel) { c.AppendSnapshot(nil) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := newChannel(t, testConfig(0))
			c.Send(1, []byte("a"))
			receive(t, c, data(2, 0, 3, 0, "c")) // held back: seq 1 and 2 missing
			c.Ready()
			c.AppendSnapshot(nil) // a correct state passes
			tt.breakIt(c)
			v := invariants.Catch(func() { tt.input(c) })
			switch {
			case v == nil:
				t.Fatalf("no invariant fired, want one about %q", tt.want)
			case !strings.Contains(v.Detail, tt.want):
				t.Fatalf("%v fired, want one about %q", v, tt.want)
			}
		})
	}
}
