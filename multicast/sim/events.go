package sim

import "github.com/flexkv/flexkv/partition"

type eventKind uint8

const (
	evSubmit    eventKind = iota + 1 // a client's request reaches its entry group
	evFrame                          // a frame reaches its receiver
	evTick                           // every node ticks
	evPartition                      // a partition epoch starts
	evHeal                           // one cut heals
	evHealAll                        // the faults end
	evChange                         // the operator submits a change of the epoch
)

// event is something that happens at a simulated time. Events at the same
// time happen in the order they were scheduled (interaction.Queue), so that
// a run depends on nothing but its seed.
type event struct {
	atUs int64
	kind eventKind
	// evSubmit: the job; evFrame: the receiver and the encoded frame;
	// evHeal: the cut, b == NoGroup to isolate a.
	job  int
	to   partition.GroupID
	data []byte
	a, b partition.GroupID
}
