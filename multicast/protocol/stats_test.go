package protocol_test

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/multicast/protocol"
)

func TestStats(t *testing.T) {
	top := testTopology(t)
	for _, p := range protocol.All() {
		t.Run(p.String(), func(t *testing.T) {
			stats := p.Stats()
			if len(stats) == 0 {
				t.Fatal("no stats")
			}
			names := map[string]bool{}
			for _, st := range stats {
				if !strings.HasPrefix(st.Name, p.String()+"_") || st.Help == "" {
					t.Errorf("stat %+v: want a name that starts with %s_ and a help text", st, p)
				}
				if names[st.Name] {
					t.Errorf("stat %s listed twice", st.Name)
				}
				names[st.Name] = true
				if (st.Kind == protocol.Counter) != strings.HasSuffix(st.Name, "_total") || (st.Kind != protocol.Counter && st.Kind != protocol.Gauge) {
					t.Errorf("stat %s has kind %d: counters, and only they, end in _total", st.Name, st.Kind)
				}
			}
			core, err := p.New(1, top)
			if err != nil {
				t.Fatal(err)
			}
			readings := p.Read(core, nil)
			seen := make([]bool, len(stats))
			for _, r := range readings {
				if r.Stat < 0 || r.Stat >= len(stats) {
					t.Fatalf("reading %+v: no such stat", r)
				}
				seen[r.Stat] = true
				if (r.Label == "") != (stats[r.Stat].Label == "") {
					t.Errorf("reading %+v of %s (label %q): a value for the label iff it has one", r, stats[r.Stat].Name, stats[r.Stat].Label)
				}
			}
			for i, ok := range seen {
				if !ok {
					t.Errorf("stat %s is never read", stats[i].Name)
				}
			}
			// Read appends.
			if again := p.Read(core, readings[:1:1]); len(again) != len(readings)+1 {
				t.Errorf("Read appended %d readings to one, want %d", len(again)-1, len(readings))
			}
		})
	}
	// A core read as another protocol's is a broken invariant.
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "invariant") {
			t.Errorf("Read of a skeen core as flexcast: recovered %v, want a panic naming the invariant", r)
		}
	}()
	core, err := lookup(t, protocol.Skeen).New(0, top)
	if err != nil {
		t.Fatal(err)
	}
	lookup(t, protocol.FlexCast).Read(core, nil)
}
