package server

import (
	"fmt"
	"math"
	"time"

	"github.com/flexkv/flexkv/partition"
)

// LatencyMode says how the emulated WAN between groups (DESIGN 8) turns the
// cluster's latency matrix, which holds round trips, into the one-way delay
// of every send from one group's leader to another group. Only sends between
// groups are delayed: a client is another process, and the way to and from
// it is not emulated; neither is raft's traffic inside a group.
type LatencyMode string

const (
	// LatencyReal delays a send by half the matrix value, so that a round
	// trip between two groups takes the matrix value: the default.
	LatencyReal LatencyMode = "real"
	// LatencyPaper delays a send by the full matrix value, as the FlexCast
	// paper's emulation did: a round trip takes twice the value.
	LatencyPaper LatencyMode = "paper"
	// LatencyOff delays nothing, matrix or not.
	LatencyOff LatencyMode = "off"
)

// ParseLatencyMode checks that s names a latency mode; "" is LatencyReal.
func ParseLatencyMode(s string) (LatencyMode, error) {
	switch m := LatencyMode(s); m {
	case "":
		return LatencyReal, nil
	case LatencyReal, LatencyPaper, LatencyOff:
		return m, nil
	default:
		return "", fmt.Errorf("server: latency mode %q: want real, paper or off", s)
	}
}

// OneWay returns the delay of one send between two regions whose round trip
// the matrix gives as rttMs milliseconds ("" is LatencyReal).
func (m LatencyMode) OneWay(rttMs float64) time.Duration {
	ms := rttMs
	switch m {
	case LatencyReal, "":
		ms /= 2
	case LatencyPaper:
	case LatencyOff:
		return 0
	default:
		panic(fmt.Sprintf("server: latency mode %q", string(m)))
	}
	return time.Duration(math.Round(ms * float64(time.Millisecond)))
}

// wanDelays returns the one-way delay from group self to every other group
// of top: the matrix value between their regions (the diagonal for two
// groups of one region) turned by mode. No matrix, LatencyOff, or only zero
// delays: nil.
func wanDelays(top *partition.Topology, lat *partition.Latency, self partition.GroupID, mode LatencyMode) map[partition.GroupID]time.Duration {
	if lat == nil || mode == LatencyOff {
		return nil
	}
	var delays map[partition.GroupID]time.Duration
	for g := range partition.GroupID(top.Len()) {
		if g == self {
			continue
		}
		if d := mode.OneWay(lat.GroupRTTMs(top, self, g)); d > 0 {
			if delays == nil {
				delays = make(map[partition.GroupID]time.Duration)
			}
			delays[g] = d
		}
	}
	return delays
}
