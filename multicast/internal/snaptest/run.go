package snaptest

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/flexkv/flexkv/internal/wire"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
)

// Restorer records the outputs of a run of cores and, with restores on,
// replaces a random core by its restored Copy at random points, drawing
// from its own generator so that the workload is the same either way. Two
// runs of one workload, one without restores, must then be the same run
// (Same): a core restored from its snapshot behaves exactly as the core it
// was taken of.
type Restorer[C Snapshotter] struct {
	// Cores are the run's cores, by group: the driver's own slice, in
	// which Maybe replaces a core.
	Cores []C
	codec func(g partition.GroupID) Codec[C]
	rng   *rand.Rand // nil: no restores
	// Taken, if set, sees each core about to be replaced and its snapshot.
	Taken func(g partition.GroupID, c C, snap []byte)

	trace    []byte // every output and refusal, in order
	restores int
}

// NewRestorer returns a recorder of a run of cores; with rng set, Maybe
// restores cores, each with the codec of its group.
func NewRestorer[C Snapshotter](cores []C, codec func(g partition.GroupID) Codec[C], rng *rand.Rand) *Restorer[C] {
	return &Restorer[C]{Cores: cores, codec: codec, rng: rng}
}

// Record appends what group g output to the trace.
func (r *Restorer[C]) Record(g partition.GroupID, out multicast.Output) {
	r.trace = wire.AppendUvarint(r.trace, uint64(g))
	for _, s := range out.Sends {
		r.trace = wire.AppendUvarint(r.trace, uint64(s.To))
		r.trace = append(r.trace, byte(s.Kind))
		r.trace = multicast.AppendMsgID(r.trace, s.About)
		r.trace = wire.AppendBytes(r.trace, s.Payload)
	}
	for _, m := range out.Deliveries {
		r.trace = multicast.AppendMessage(r.trace, m)
	}
}

// Refused records that a core refused an input (a busy request).
func (r *Restorer[C]) Refused() { r.trace = append(r.trace, 0xff) }

// Maybe replaces, one time in three, a random core by its restored Copy.
func (r *Restorer[C]) Maybe(t testing.TB) {
	t.Helper()
	if r.rng == nil || r.rng.IntN(3) != 0 {
		return
	}
	g := partition.GroupID(r.rng.IntN(len(r.Cores)))
	c, snap := Copy(t, r.codec(g), r.Cores[g])
	if r.Taken != nil {
		r.Taken(g, r.Cores[g], snap)
	}
	r.Cores[g] = c
	r.restores++
}

// Restores returns the number of cores restored.
func (r *Restorer[C]) Restores() int { return r.restores }

// Same checks that restored ran as plain: some core was restored, every
// output is the same, and every core ends in the same state.
func Same[C Snapshotter](t testing.TB, seed uint64, plain, restored *Restorer[C]) {
	t.Helper()
	if restored.restores == 0 {
		t.Fatalf("seed %d: no core was restored", seed)
	}
	if !bytes.Equal(plain.trace, restored.trace) {
		t.Fatalf("seed %d: outputs differ after %d restores (%d and %d bytes of trace)", seed, restored.restores, len(plain.trace), len(restored.trace))
	}
	for g := range plain.Cores {
		if !bytes.Equal(plain.Cores[g].AppendSnapshot(nil), restored.Cores[g].AppendSnapshot(nil)) {
			t.Fatalf("seed %d: final states of group %d differ", seed, g)
		}
	}
}
