package bench

import (
	"strings"
	"testing"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/server"
)

// TestStepEntry: the clients' step is measured at the group a protocol
// delivers at once on entry (FlexCast's lca, the lowest rank, not the
// nearest group; the tree's lca), less the emulated round trip to it; never
// under Skeen, whose entry waits for timestamps, nor where the round trip
// is unknown (no emulation against a cluster on a real network, a region
// missing from the matrix).
func TestStepEntry(t *testing.T) {
	// Ranks a < b < c; b is the tree's root. Round trips: a-b 40, a-c 10,
	// b-c 30, 2 inside a region; region "x" of group c is missing below.
	lat, err := partition.ReadLatency(strings.NewReader("from\\to,ra,rb,rc\nra,2,40,10\nrb,40,2,30\nrc,10,30,2\n"))
	if err != nil {
		t.Fatal(err)
	}
	top, err := partition.NewTopology(partition.Spec{
		Groups: []partition.Group{{Name: "a", Region: "ra"}, {Name: "b", Region: "rb"}, {Name: "c", Region: "rc"}},
		Parent: map[string]string{"a": "b", "c": "b"},
	})
	if err != nil {
		t.Fatal(err)
	}
	view := &client.Topology{Groups: top, Latency: lat}
	lookup := func(name string) *protocol.Protocol {
		p, err := protocol.Lookup(protocol.FlexCast)
		if name != "" {
			p, err = protocol.Lookup(protocol.Tree)
			if name == "skeen" {
				p, err = protocol.Lookup(protocol.Skeen)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	flexcast, tree := lookup(""), lookup("tree")
	for _, tc := range []struct {
		name      string
		entry     func(int, []int) (int, float64)
		home      int
		groups    []int
		want      int
		wantRTTMs float64
	}{
		// A client of c to {a, c}: FlexCast enters at a (rank 0), 10 ms
		// away, though c is the client's own group.
		{"flexcast remote lca", stepEntry(flexcast, view, server.LatencyReal, false), 2, []int{0, 2}, 0, 10},
		{"flexcast home lca", stepEntry(flexcast, view, server.LatencyReal, false), 0, []int{0, 1}, 0, 2},
		// The tree enters at b, the lca of a and c, 30 ms from c.
		{"tree", stepEntry(tree, view, server.LatencyReal, false), 2, []int{0, 2}, 1, 30},
		// Without emulation, in one process: the entry, no round trip.
		{"local, no emulation", stepEntry(flexcast, view, server.LatencyOff, true), 2, []int{0, 2}, 0, 0},
		{"bad group", stepEntry(flexcast, view, server.LatencyReal, false), 2, []int{0, 7}, -1, 0},
	} {
		e, rtt := tc.entry(tc.home, tc.groups)
		if e != tc.want || rtt != tc.wantRTTMs {
			t.Errorf("%s: entry %d, round trip %v ms; want %d, %v", tc.name, e, rtt, tc.want, tc.wantRTTMs)
		}
	}
	if stepEntry(lookup("skeen"), view, server.LatencyReal, true) != nil {
		t.Error("Skeen: a step is measured, but its entry waits for timestamps")
	}
	if stepEntry(flexcast, view, server.LatencyOff, false) != nil {
		t.Error("no emulation against a remote cluster: a step is measured, with an unknown round trip")
	}
	// A group whose region the matrix lacks: its round trip is unknown.
	top2, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a", Region: "ra"}, {Name: "x", Region: "x"}}})
	if err != nil {
		t.Fatal(err)
	}
	if e, _ := stepEntry(flexcast, &client.Topology{Groups: top2, Latency: lat}, server.LatencyReal, true)(1, []int{0, 1}); e != -1 {
		t.Errorf("a region missing from the matrix: entry %d, want -1 (unknown)", e)
	}
}
