package server

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/partition"
)

func TestParseLatencyMode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want LatencyMode
	}{{"", LatencyReal}, {"real", LatencyReal}, {"paper", LatencyPaper}, {"off", LatencyOff}} {
		got, err := ParseLatencyMode(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("ParseLatencyMode(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range []string{"Real", "half", "none"} {
		if _, err := ParseLatencyMode(bad); err == nil || !strings.Contains(err.Error(), "want real, paper or off") {
			t.Errorf("ParseLatencyMode(%q): error %v, want one listing the modes", bad, err)
		}
	}
}

func TestLatencyModeOneWay(t *testing.T) {
	for _, tc := range []struct {
		mode LatencyMode
		rtt  float64
		want time.Duration
	}{
		{LatencyReal, 40, 20 * time.Millisecond},
		{"", 40, 20 * time.Millisecond},
		{LatencyReal, 0.5, 250 * time.Microsecond},
		{LatencyPaper, 40, 40 * time.Millisecond},
		{LatencyOff, 40, 0},
		{LatencyReal, 0, 0},
	} {
		if got := tc.mode.OneWay(tc.rtt); got != tc.want {
			t.Errorf("%q.OneWay(%v) = %v, want %v", tc.mode, tc.rtt, got, tc.want)
		}
	}
}

func TestWANDelays(t *testing.T) {
	// Group eu-central-1 moves to region eu-west-1: from eu-west-1, the
	// diagonal applies.
	cfg := testcluster.Layout(t, "flexcast", testaddr.Server)
	cfg.Groups[2].Region = "eu-west-1"
	top, _, err := cfg.Build()
	if err != nil {
		t.Fatal(err)
	}
	lat := testcluster.WANMatrix(t)
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		lat  *partition.Latency
		mode LatencyMode
		self partition.GroupID
		want map[partition.GroupID]time.Duration
	}{
		{"real", lat, LatencyReal, 0, map[partition.GroupID]time.Duration{1: 20 * ms, 2: 2 * ms}},
		{"paper", lat, LatencyPaper, 0, map[partition.GroupID]time.Duration{1: 40 * ms, 2: 4 * ms}},
		{"real from eu-west-3", lat, LatencyReal, 1, map[partition.GroupID]time.Duration{0: 20 * ms, 2: 20 * ms}},
		{"off", lat, LatencyOff, 0, nil},
		{"no matrix", nil, LatencyPaper, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := wanDelays(top, tc.lat, tc.self, tc.mode); !maps.Equal(got, tc.want) {
				t.Errorf("delays %v, want %v", got, tc.want)
			}
		})
	}
}

func TestOpenRejectsLatencySettings(t *testing.T) {
	cfg := testcluster.Layout(t, "flexcast", testaddr.Server)
	small, err := partition.NewLatency([]string{"eu-west-1"}, [][]float64{{1}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string
	}{
		{"mode", func(c *Config) { c.LatencyMode = "slow" }, `latency mode "slow"`},
		{"jitter", func(c *Config) { c.LatencyJitter = 2 }, "latency jitter 2"},
		{"matrix without the regions", func(c *Config) { c.Latency = small }, `region "eu-west-3", which the latency matrix lacks`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Cluster: cfg, NodeID: "r1", Dir: t.TempDir(), NoSync: true}
			tc.change(&c)
			s, err := Open(c)
			if err == nil {
				_ = s.Close()
				t.Fatal("Open accepted the configuration")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want one containing %q", err, tc.want)
			}
		})
	}
}
