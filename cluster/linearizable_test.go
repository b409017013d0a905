package cluster

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
	"github.com/flexkv/flexkv/replication"
	"github.com/flexkv/flexkv/txn"
)

// A single-key operation of the linearizability test.
type kvInput struct {
	op    string // get, rget (a read-only transaction of one get), put, add
	key   string
	value string // put
	delta int64  // add
}

// Its outcome. unknown: the call (a put or an add) failed, so it may or may
// not have taken effect, and any result fits. A failed get is not kept at
// all: it has no effect on the state, and as an operation that never
// returns it would only widen porcupine's search.
type kvOutput struct {
	unknown bool
	found   bool   // get
	value   string // get
	sum     int64  // add: the new value
}

// kvModel is a register per key holding a decimal string ("" = missing,
// which add reads as 0), partitioned by key.
var kvModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(kvInput).key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		var out [][]porcupine.Operation
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(string), input.(kvInput), output.(kvOutput)
		switch in.op {
		case "get", "rget":
			return out.unknown || (out.found == (st != "") && out.value == st), st
		case "put":
			return true, in.value
		case "add":
			var cur int64
			if st != "" {
				var err error
				if cur, err = strconv.ParseInt(st, 10, 64); err != nil {
					return false, st
				}
			}
			next := cur + in.delta
			return out.unknown || out.sum == next, strconv.FormatInt(next, 10)
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(kvInput), output.(kvOutput)
		return fmt.Sprintf("%s(%s %s %d) -> %+v", in.op, in.key, in.value, in.delta, out)
	},
}

// TestModelRejectsStaleRead: the model is strict enough for the test below
// to fail: a read of an overwritten value after the overwrite returned.
func TestModelRejectsStaleRead(t *testing.T) {
	history := []porcupine.Operation{
		{Input: kvInput{op: "put", key: "k", value: "1"}, Call: 0, Output: kvOutput{}, Return: 1},
		{Input: kvInput{op: "put", key: "k", value: "2"}, Call: 2, Output: kvOutput{}, Return: 3},
		{Input: kvInput{op: "get", key: "k"}, Call: 4, Output: kvOutput{found: true, value: "1"}, Return: 5},
	}
	if porcupine.CheckOperations(kvModel, history) {
		t.Fatal("a stale read passed the linearizability check")
	}
	history[2].Output = kvOutput{found: true, value: "2"}
	if !porcupine.CheckOperations(kvModel, history) {
		t.Fatal("a linearizable history failed the check")
	}
	// The same of a read-only transaction's read.
	history[2].Input = kvInput{op: "rget", key: "k"}
	if !porcupine.CheckOperations(kvModel, history) {
		t.Fatal("a linearizable history of a read-only transaction failed the check")
	}
	history[2].Output = kvOutput{found: true, value: "1"}
	if porcupine.CheckOperations(kvModel, history) {
		t.Fatal("a stale read of a read-only transaction passed the linearizability check")
	}
}

// unknownSearchable is how many writes of unknown outcome a history may
// hold and still be decided within the check's budget on any machine.
const unknownSearchable = 20

// TestLinearizableUnderFaults runs concurrent get, put and add on keys of
// three groups through the client while leaders are killed and replicas cut
// off, and checks the history with porcupine.
func TestLinearizableUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos run")
	}
	for _, proto := range []string{"flexcast", "skeen", "tree"} {
		t.Run(proto, func(t *testing.T) { runLinearizable(t, proto) })
	}
}

// runLinearizable runs TestLinearizableUnderFaults under proto.
func runLinearizable(t *testing.T, proto string) {
	const (
		workers = 6
		runFor  = 5 * time.Second
	)
	// A 200ms election timeout: fast failover under the faults; the client
	// retries at the new leaders.
	l := startLocalConfig(t, Config{Cluster: testcluster.Layout(t, proto, testaddr.Cluster), Dir: t.TempDir(),
		Replication: replication.Config{ElectionTimeout: 200 * time.Millisecond}})
	ctx := ctxTimeout(t, 2*time.Minute)
	c, err := client.New(ctx, client.Config{Endpoints: l.Endpoints(), TLS: l.ClientTLS()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	keys := []string{"w/0001/k", "w/0002/k", "w/0003/k", "w/0005/k"}

	runCtx, stopRun := context.WithTimeout(ctx, runFor)
	defer stopRun()
	chaos := &Chaos{
		Local: l, Seed: 3, Down: 600 * time.Millisecond,
		Faults: []Fault{
			{Kind: FaultLeaderKill, Every: 1500 * time.Millisecond},
			{Kind: FaultPartition, Every: 2 * time.Second},
		},
		Logger: testLogger(t),
	}
	chaosDone := make(chan int, 1)
	go func() { chaosDone <- chaos.Run(runCtx) }()

	start := time.Now()
	now := func() int64 { return int64(time.Since(start)) }
	var h linHistory
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 5))
			for runCtx.Err() == nil {
				in := randomKVInput(rng, keys)
				callCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
				call := now()
				out, err := callKV(callCtx, c, in)
				ret := now()
				cancel()
				h.record(porcupine.Operation{ClientId: w, Input: in, Call: call, Output: out, Return: ret}, err)
			}
		}()
	}
	wg.Wait()
	history, unknown, failedGets := h.ops, h.unknown, h.failedGets
	faults := <-chaosDone
	// Illegal is a violation (TestModelRejectsStaleRead shows the model
	// finds one). Unknown means the search ran out of its budget, which
	// many writes of unknown outcome (each may take effect at any point
	// after its call) can cause on a slow machine: with a few of them the
	// search is quick, and running out of time would hide a problem.
	switch res := porcupine.CheckOperationsTimeout(kvModel, history, time.Minute); res {
	case porcupine.Ok:
	case porcupine.Unknown:
		if unknown <= unknownSearchable {
			t.Errorf("%s: the check of %d operations, only %d of unknown outcome, ran out of its time budget", proto, len(history), unknown)
		}
		t.Logf("%s: the check of %d operations (%d unknown) ran out of its time budget: linearizability not decided", proto, len(history), unknown)
	default:
		t.Fatalf("history of %d operations (%d unknown): %s", len(history), unknown, res)
	}
	if len(history)-unknown < 100 {
		t.Errorf("only %d operations completed: the check proves little", len(history)-unknown)
	}
	if faults == 0 {
		t.Errorf("no fault injected")
	}
	t.Logf("%s: %d operations (%d unknown, %d failed gets left out), %d faults", proto, len(history), unknown, failedGets, faults)
}

// linHistory is the history of a linearizability run, recorded by its
// concurrent workers.
type linHistory struct {
	mu         sync.Mutex
	ops        []porcupine.Operation
	unknown    int // failed writes, kept as operations that may take effect any time after their call
	failedGets int // dropped from the history
}

// record adds op, whose call failed with err if not nil.
func (h *linHistory) record(op porcupine.Operation, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case err != nil && (op.Input.(kvInput).op == "get" || op.Input.(kvInput).op == "rget"):
		// A read changes nothing: leaving it out leaves every
		// linearization of the rest as it was.
		h.failedGets++
	case err != nil:
		// It may take effect at any time after the call.
		op.Output, op.Return = kvOutput{unknown: true}, math.MaxInt64
		h.ops = append(h.ops, op)
		h.unknown++
	default:
		h.ops = append(h.ops, op)
	}
}

// randomKVInput draws a read (a Get or a read-only transaction, each as
// likely), a put of a value below 1000 or an add of -10 to 10, each as
// likely, on one of keys.
func randomKVInput(rng *rand.Rand, keys []string) kvInput {
	in := kvInput{key: keys[rng.IntN(len(keys))]}
	switch rng.IntN(3) {
	case 0:
		in.op = "get"
		if rng.IntN(2) == 0 {
			in.op = "rget"
		}
	case 1:
		in.op, in.value = "put", strconv.Itoa(rng.IntN(1000))
	default:
		in.op, in.delta = "add", int64(rng.IntN(21)-10)
	}
	return in
}

// callKV makes the call in through c and returns what it answered.
func callKV(ctx context.Context, c *client.Client, in kvInput) (kvOutput, error) {
	var out kvOutput
	var err error
	switch in.op {
	case "get":
		var v []byte
		v, out.found, err = c.Get(ctx, []byte(in.key))
		out.value = string(v)
	case "rget":
		var res *txn.Result
		res, err = c.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: txn.OpGet, Key: []byte(in.key)}}})
		if err == nil {
			out.found, out.value = res.Results[0].Found, string(res.Results[0].Value)
		}
	case "put":
		err = c.Put(ctx, []byte(in.key), []byte(in.value))
	case "add":
		var res *txn.Result
		res, err = c.Txn(ctx, &txn.Txn{Then: []txn.Op{{Kind: txn.OpAdd, Key: []byte(in.key), Int: in.delta}}})
		if err == nil {
			out.sum = res.Results[0].Int
		}
	}
	return out, err
}
