package sim

import (
	"math/rand/v2"
	"slices"

	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// clientsPerGroup: each group is the home of this many clients.
const clientsPerGroup = 2

// job is one message of the workload: who sends it where, and when.
type job struct {
	msg   multicast.Message
	home  partition.GroupID
	entry partition.GroupID
	atUs  int64 // when the client sends it
	// client is the index of the client that sends it (a resubmission's,
	// that of the client of the job it replaces); epoch, the epoch the
	// client routed it with: its client's when it was first submitted,
	// then what a refusal told.
	client int
	epoch  uint64
}

// makeWorkload draws the messages of a normalized cfg: submission times
// uniform over Messages*GapMs, a random client (hence home group) each, a
// destination set of 1..DstMax groups that holds the home group, further
// destinations chosen by locality. Sequence numbers follow each client's
// submission times.
func makeWorkload(cfg Config, w *world, proto *protocol.Protocol, rng *rand.Rand) []job {
	n := w.top.Len()
	windowUs := msToUs(float64(cfg.Messages) * cfg.GapMs)
	times := make([]int64, cfg.Messages)
	for i := range times {
		times[i] = rng.Int64N(windowUs + 1)
	}
	slices.Sort(times)
	dstMax := min(cfg.DstMax, n)
	seq := make([]uint64, n*clientsPerGroup)
	jobs := make([]job, cfg.Messages)
	for i := range jobs {
		client := rng.IntN(len(seq))
		home := partition.GroupID(client % n)
		seq[client]++
		size := 1 + rng.IntN(dstMax)
		dst := partition.SetOf(home)
		for dst.Len() < size {
			rest := w.top.All() &^ dst
			var g partition.GroupID
			if rng.Float64() < cfg.Locality {
				g = w.nearest(home, rest)[0]
			} else {
				members := rest.Slice()
				g = members[rng.IntN(len(members))]
			}
			dst = dst.Add(g)
		}
		payload := make([]byte, rng.IntN(payloadMax+1))
		for j := range payload {
			payload[j] = byte(rng.Uint32())
		}
		// Client ids start at 1, so that c0 never appears in a log.
		id := multicast.MsgID{Client: uint64(client) + 1, Seq: seq[client]}
		jobs[i] = job{
			msg:    multicast.Message{ID: id, Dst: dst, Payload: payload},
			home:   home,
			entry:  proto.Entry(w.top, w.lat, protocol.HomeOrigin(home), dst),
			atUs:   times[i],
			client: client,
		}
	}
	return jobs
}
