package channel

import (
	"bytes"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/flexkv/flexkv/internal/wire"
)

// busyChannel returns group 1 of three with every part of the state in use:
// outboxes, a resend timer, a repair in progress, a hold-back queue, due
// acks, spent nacks and charged bytes.
func busyChannel(t *testing.T) *Channel {
	t.Helper()
	c := newChannel(t, testConfig(1))
	c.Send(0, []byte("a"))
	c.Send(0, nil)
	c.Send(2, []byte("c"))
	c.Charge(3)
	c.Tick()
	receive(t, c,
		data(0, 1, 1, 0, "x"), data(0, 1, 3, 0, "z"), data(0, 1, 5, 0, "v"),
		ctl(2, 1, 0, 1), data(2, 1, 2, 0, "q"), data(0, 1, 1, 0, "x"))
	c.Ready()
	l0, l2 := &c.links[0], &c.links[2]
	if l0.idle != 1 || len(l0.holdback) != 2 || !l0.ackDue || !l0.nackSent || !l2.nackServed || len(l2.holdback) != 1 ||
		l2.repair == 0 || l0.holdbackBytes == 0 || c.Backlog(0) != 5 {
		t.Fatalf("setup: links %+v and %+v do not use every part of the state", *l0, *l2)
	}
	return c
}

func TestSnapshotRoundTrip(t *testing.T) {
	orig := busyChannel(t)
	snap := orig.AppendSnapshot([]byte("prefix"))[len("prefix"):]
	restored, err := RestoreChannel(snap, orig.Config())
	if err != nil {
		t.Fatalf("RestoreChannel: %v", err)
	}
	if again := restored.AppendSnapshot(nil); !bytes.Equal(snap, again) {
		t.Fatalf("snapshot of the restored channel differs:\n got %x\nwant %x", again, snap)
	}
	if diff := cmp.Diff(orig.Stats(), restored.Stats()); diff != "" {
		t.Errorf("restored Stats (-want +got):\n%s", diff)
	}
	// Both behave the same from here on.
	steps := []func(c *Channel) error{
		func(c *Channel) error { return c.Receive(ctl(2, 1, 0, 1)) }, // nack already served this tick
		func(c *Channel) error { return c.Receive(data(0, 1, 2, 1, "y")) },
		func(c *Channel) error { return c.Receive(data(0, 1, 4, 1, "w")) },
		func(c *Channel) error { c.Tick(); return nil },
		func(c *Channel) error { return c.Receive(data(2, 1, 3, 0, "r")) }, // a new nack
		func(c *Channel) error { c.Send(2, []byte("d")); return nil },
		func(c *Channel) error { c.Tick(); c.Tick(); return nil },
		func(c *Channel) error { return c.Receive(ctl(0, 1, 2, 0)) },
	}
	for i, step := range steps {
		errO, errR := step(orig), step(restored)
		if errO != nil || errR != nil {
			t.Fatalf("step %d: %v, %v", i, errO, errR)
		}
		if diff := cmp.Diff(orig.Ready(), restored.Ready(), equateEmpty); diff != "" {
			t.Fatalf("step %d: outputs differ (-original +restored):\n%s", i, diff)
		}
	}
	if a, b := orig.AppendSnapshot(nil), restored.AppendSnapshot(nil); !bytes.Equal(a, b) {
		t.Fatalf("states differ after the same steps")
	}
}

func TestRestoreRejects(t *testing.T) {
	orig := busyChannel(t)
	snap := orig.AppendSnapshot(nil)
	for n := range len(snap) {
		if _, err := RestoreChannel(snap[:n], orig.Config()); !errors.Is(err, wire.ErrCorrupt) {
			t.Fatalf("RestoreChannel of %d of %d bytes = %v, want ErrCorrupt", n, len(snap), err)
		}
	}
	tests := []struct {
		name   string
		modify func(*Config)
	}{
		{"other group", func(c *Config) { c.Self = 2 }},
		{"other cluster size", func(c *Config) { c.Groups = 4 }},
		{"hold-back queue beyond HoldbackMax", func(c *Config) { c.HoldbackMax = 1 }},
		{"resend timer beyond ResendTicks", func(c *Config) { c.ResendTicks = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := orig.Config()
			tt.modify(&cfg)
			if _, err := RestoreChannel(snap, cfg); !errors.Is(err, wire.ErrCorrupt) {
				t.Fatalf("RestoreChannel with %+v = %v, want ErrCorrupt", cfg, err)
			}
		})
	}
	cfg := orig.Config()
	cfg.OutboxMax = 0
	if _, err := RestoreChannel(snap, cfg); err == nil {
		t.Errorf("RestoreChannel accepted an invalid config")
	}
}

func TestSnapshotWithUndrainedOutputPanics(t *testing.T) {
	c := newChannel(t, testConfig(0))
	receive(t, c, data(1, 0, 1, 0, "x"))
	defer func() {
		if recover() == nil {
			t.Errorf("AppendSnapshot with an envelope not handed up did not panic")
		}
	}()
	c.AppendSnapshot(nil)
}

// FuzzRestoreChannel checks that RestoreChannel never panics and that what it
// accepts encodes back to the same bytes.
func FuzzRestoreChannel(f *testing.F) {
	cfg := testConfig(1)
	c, err := New(cfg)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(c.AppendSnapshot(nil))
	c.Send(0, []byte("a"))
	c.Tick()
	if err := c.Receive(data(2, 1, 3, 0, "z")); err != nil {
		f.Fatal(err)
	}
	c.Ready()
	f.Add(c.AppendSnapshot(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := RestoreChannel(b, cfg)
		if err != nil {
			return
		}
		if err := r.check(); err != nil {
			t.Fatalf("restored a broken state: %v", err)
		}
		if again := r.AppendSnapshot(nil); !bytes.Equal(again, b) {
			// Varints may be padded in the input; the re-encoding must then
			// at least restore to the same state.
			r2, err := RestoreChannel(again, cfg)
			if err != nil {
				t.Fatalf("re-encoded snapshot rejected: %v", err)
			}
			if !bytes.Equal(r2.AppendSnapshot(nil), again) {
				t.Fatalf("snapshot encoding is not deterministic")
			}
		}
	})
}
