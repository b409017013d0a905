// Package workload is the client side of a Jepsen-style run (DESIGN 12):
// many clients running list-append transactions over keys of several
// groups, and single-key registers, against a FlexKV cluster, recording
// every invocation and completion as a history of DESIGN 10.4.
//
// A list is stored as its elements in decimal, comma-separated ("3,17,42";
// a missing key is the empty list). FlexKV's transactions are one-shot
// (DESIGN 6): a transaction cannot compute a value from what it reads. An
// append is therefore a put guarded by a compare: the client believes the
// list holds L (the last value it saw), and the transaction is
//
//	if   k1 = L1 and k2 = L2 ...          (every key appended to)
//	then put k1 = L1+v1, put k2 = L2+v2, get r1, get r2 ...
//	else get k1, get k2 ...               (to learn the lists)
//
// so that a transaction that commits appended exactly v1 to k1 (the list
// was L1, now L1+v1) and read r1, r2 at the same point of the order. The
// else branch writes nothing: the operation failed (type fail) and the
// client remembers what it read for its next attempt. A transaction whose
// answer is lost (a timeout, a server gone) is info: it may have run.
//
// Each key of a transaction appears once. Keys take at most AppendsPerKey
// appends, then their slot moves to a fresh key, so that lists stay short
// (Elle's key rotation).
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/jepsen/history"
	"github.com/flexkv/flexkv/txn"
)

// Config configures a run.
type Config struct {
	// Client is the cluster's client; Run does not close it.
	Client *client.Client
	// Prefixes are key prefixes, each in a partition (of different groups,
	// so that transactions span groups): list and register keys are a
	// prefix followed by "jepsen/...".
	Prefixes []string
	// Workers is the number of concurrent clients (0: 10).
	Workers int
	// Seed makes the choice of operations repeatable.
	Seed uint64
	// ListsPerPrefix is the number of list keys in use under each prefix
	// at a time (0: 2); RegistersPerPrefix the registers (0: 1).
	ListsPerPrefix, RegistersPerPrefix int
	// AppendsPerKey bounds the appends to one list key (0: 32), and
	// WritesPerRegister the writes to one register key (0: 64), after
	// which the slot moves to a fresh key: a key's history stays short,
	// and so its check.
	AppendsPerKey, WritesPerRegister int
	// MopsMax is the most micro-operations of a transaction (0: 4).
	MopsMax int
	// RegisterPercent is the share of operations on registers (0 to 100).
	RegisterPercent int
	// OpTimeout bounds one operation (0: 5s); past it the operation is
	// info.
	OpTimeout time.Duration
	// FinalReads, after the run, reads every list key ever appended to,
	// MopsMax keys a transaction, each given FinalTimeout (0: 30s): the
	// last word on each list's order, in which every acknowledged append
	// must be (Elle's final reads). Run it once the faults are healed.
	FinalReads   bool
	FinalTimeout time.Duration
	// Healed, when set, is closed once the faults are healed: the final
	// reads wait for it.
	Healed <-chan struct{}
}

// finalProcess is the process of the final reads.
const finalProcess = 1 << 20

func (c *Config) defaults() error {
	if c.Client == nil || len(c.Prefixes) == 0 {
		return errors.New("workload: a client and at least one key prefix are required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Workers, 10)
	def(&c.ListsPerPrefix, 2)
	def(&c.RegistersPerPrefix, 1)
	def(&c.AppendsPerKey, 32)
	def(&c.WritesPerRegister, 64)
	def(&c.MopsMax, 4)
	if c.OpTimeout <= 0 {
		c.OpTimeout = 5 * time.Second
	}
	if c.RegisterPercent < 0 || c.RegisterPercent > 100 {
		return fmt.Errorf("workload: RegisterPercent %d: want 0 to 100", c.RegisterPercent)
	}
	return nil
}

// slot is a list key in use: its generation and the appends it took.
type slot struct {
	prefix  string
	n, gen  int
	appends int
}

func (s *slot) key() string { return fmt.Sprintf("%sjepsen/l/%d.%d", s.prefix, s.n, s.gen) }

// shared is what the workers share: the slots, the next value, and the
// last value seen of each list key.
type shared struct {
	mu        sync.Mutex
	slots     []*slot
	registers []*slot
	next      int64
	seen      map[string]string
	perKey    int
	perReg    int
}

// register returns a register key, and the value to write when write.
func (s *shared) register(rng *rand.Rand, write bool) (string, int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.registers[rng.IntN(len(s.registers))]
	if !write {
		return sl.regKey(), 0
	}
	if sl.appends == s.perReg {
		sl.gen, sl.appends = sl.gen+1, 0
	}
	sl.appends++
	s.next++
	return sl.regKey(), s.next
}

func (s *slot) regKey() string { return fmt.Sprintf("%sjepsen/r/%d.%d", s.prefix, s.n, s.gen) }

// pick returns n distinct list keys and, for those to append to, the
// value to append, taking an append from each key's budget.
func (s *shared) pick(rng *rand.Rand, n int, appendPercent int) []history.Mop {
	s.mu.Lock()
	defer s.mu.Unlock()
	var mops []history.Mop
	for _, i := range rng.Perm(len(s.slots))[:min(n, len(s.slots))] {
		sl := s.slots[i]
		if rng.IntN(100) >= appendPercent {
			mops = append(mops, history.ReadList(sl.key(), nil))
			continue
		}
		if sl.appends == s.perKey {
			sl.gen, sl.appends = sl.gen+1, 0
		}
		sl.appends++
		s.next++
		mops = append(mops, history.Append(sl.key(), s.next))
	}
	return mops
}

func (s *shared) last(k string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[k]
}

func (s *shared) saw(k, v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[k] = v
}

// Run runs the workload until ctx ends, recording into w, and returns the
// first error that is not an operation's outcome (a history write).
func Run(ctx context.Context, cfg Config, w *history.Writer) error {
	if err := cfg.defaults(); err != nil {
		return err
	}
	sh := &shared{seen: map[string]string{}, perKey: cfg.AppendsPerKey, perReg: cfg.WritesPerRegister}
	for _, p := range cfg.Prefixes {
		for n := range cfg.ListsPerPrefix {
			sh.slots = append(sh.slots, &slot{prefix: p, n: n})
		}
		for n := range cfg.RegistersPerPrefix {
			sh.registers = append(sh.registers, &slot{prefix: p, n: n})
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, cfg.Workers)
	for i := range cfg.Workers {
		wk := &worker{cfg: &cfg, sh: sh, w: w, process: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i)))}
		wg.Go(func() { errs <- wk.loop(ctx) })
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	err := errors.Join(all...)
	if cfg.FinalReads && err == nil {
		if cfg.Healed != nil {
			<-cfg.Healed
		}
		err = finalReads(ctx, &cfg, sh, w)
	}
	return err
}

// finalReads reads every list key of every slot's generations so far.
func finalReads(ctx context.Context, cfg *Config, sh *shared, w *history.Writer) error {
	if cfg.FinalTimeout <= 0 {
		cfg.FinalTimeout = 30 * time.Second
	}
	var keys []string
	sh.mu.Lock()
	for _, sl := range sh.slots {
		for g := range sl.gen + 1 {
			keys = append(keys, (&slot{prefix: sl.prefix, n: sl.n, gen: g}).key())
		}
	}
	sh.mu.Unlock()
	fin := *cfg
	fin.OpTimeout = fin.FinalTimeout
	wk := &worker{cfg: &fin, sh: sh, w: w, process: finalProcess}
	for len(keys) > 0 {
		n := min(len(keys), cfg.MopsMax)
		mops := make([]history.Mop, n)
		for i, k := range keys[:n] {
			mops[i] = history.ReadList(k, nil)
		}
		keys = keys[n:]
		typ, err := wk.run(context.WithoutCancel(ctx), mops)
		if err != nil {
			return err
		}
		if typ == history.Info {
			wk.process++
		}
	}
	return nil
}

// worker is one client: a process of the history at a time.
type worker struct {
	cfg     *Config
	sh      *shared
	w       *history.Writer
	process int
	rng     *rand.Rand
}

func (wk *worker) loop(ctx context.Context) error {
	for ctx.Err() == nil {
		var typ history.Type
		var err error
		if wk.rng.IntN(100) < wk.cfg.RegisterPercent {
			typ, err = wk.register(ctx)
		} else {
			typ, err = wk.txn(ctx)
		}
		if err != nil {
			return err
		}
		if typ == history.Info {
			// Jepsen's rule: a process whose operation is in doubt is
			// never used again; the client goes on as a new one.
			wk.process += wk.cfg.Workers
		}
	}
	return nil
}

// record writes one line of the worker's process.
func (wk *worker) record(typ history.Type, f string, mops []history.Mop) error {
	_, err := wk.w.Record(history.Op{Process: history.Process(wk.process), Type: typ, F: f, Mops: mops})
	return err
}

// opContext is an operation's context: the run's, bounded by OpTimeout,
// and not ended by the run's end (an operation under way completes or
// times out, so that no invocation is left open).
func (wk *worker) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), wk.cfg.OpTimeout)
}

// outcome is the type of an operation that returned err: fail when it
// certainly took no effect, else info.
func outcome(err error) history.Type {
	if errors.Is(err, txn.ErrInvalid) || errors.Is(err, txn.ErrAborted) {
		return history.Fail
	}
	return history.Info
}

// decodeList reads a list from its stored value.
func decodeList(v []byte) ([]int64, error) {
	list := []int64{}
	if len(v) == 0 {
		return list, nil
	}
	for _, p := range strings.Split(string(v), ",") {
		n, err := strconv.ParseInt(p, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("workload: list value %q: %w", v, err)
		}
		list = append(list, n)
	}
	return list, nil
}
