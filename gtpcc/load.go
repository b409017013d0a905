package gtpcc

import (
	"context"
	"fmt"
	"sync"

	"github.com/flexkv/flexkv/client"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/txn"
)

// The loader's client side (DESIGN 9): Load makes the calls of the load
// procedure (procs.ProcLoad), which generates a warehouse's rows at its
// group, and writes the replicated items itself.
//
// A warehouse is loaded once: Load refuses, before writing anything, a
// warehouse that has its procs.ScaleKey (written last, once it is loaded
// whole). Loading it again would write the initial rows over rows that runs have
// changed (D_NEXT_O_ID, the YTDs, the stock and customer counters) but
// keep the orders, history rows and payment records written since, which
// then break the consistency conditions. A load that did not finish wrote
// no ScaleKey and can be run again: it writes the same rows over the ones
// it wrote.

// LoadDateDefault is the load date of a LoadConfig without one,
// 2024-01-01T00:00:00Z in Unix milliseconds: fixed, so that loading again
// writes the same rows.
const LoadDateDefault int64 = 1704067200000

// LoadConfig configures Load.
type LoadConfig struct {
	// Warehouses are the warehouses to load, each 1..procs.WarehouseMax, once.
	Warehouses []int
	// Scale is the population.
	Scale procs.Scale
	// Concurrency is the number of calls in flight (0:
	// LoadConcurrencyDefault), at most LoadConcurrencyMax.
	Concurrency int
	// Date is the date columns' value, Unix ms (0: LoadDateDefault).
	Date int64
	// Progress, when set, is called after each call with the number of
	// calls done and their total, never concurrently.
	Progress func(done, total int)
}

// LoadConcurrencyDefault and LoadConcurrencyMax bound LoadConfig.Concurrency.
const (
	LoadConcurrencyDefault = 8
	LoadConcurrencyMax     = 1024
)

// itemsPerTxn is the number of item puts per transaction.
const itemsPerTxn = txn.OpsMax

// loadJob is one call of Load: a load procedure call, or (items) a
// transaction putting items From..To.
type loadJob struct {
	items bool
	args  procs.LoadArgs
}

func (j loadJob) String() string {
	if j.items {
		return fmt.Sprintf("items %d..%d", j.args.From, j.args.To)
	}
	if j.args.Table == procs.TableWarehouse {
		return fmt.Sprintf("warehouse %d table %s", j.args.W, j.args.Table)
	}
	return fmt.Sprintf("warehouse %d table %s rows %d..%d", j.args.W, j.args.Table, j.args.From, j.args.To)
}

// checkLoadConfig validates cfg and fills its defaults.
func checkLoadConfig(cfg LoadConfig) (LoadConfig, error) {
	if _, err := warehouseSet("load", cfg.Warehouses); err != nil {
		return cfg, err
	}
	if err := cfg.Scale.Validate(); err != nil {
		return cfg, fmt.Errorf("gtpcc: load: %w", err)
	}
	switch {
	case cfg.Concurrency == 0:
		cfg.Concurrency = LoadConcurrencyDefault
	case cfg.Concurrency < 0 || cfg.Concurrency > LoadConcurrencyMax:
		return cfg, fmt.Errorf("gtpcc: load: concurrency %d, want 1..%d (0: %d)", cfg.Concurrency, LoadConcurrencyMax, LoadConcurrencyDefault)
	}
	switch {
	case cfg.Date == 0:
		cfg.Date = LoadDateDefault
	case cfg.Date < 0:
		return cfg, fmt.Errorf("gtpcc: load: date %d, want a positive Unix time in ms (0: %d)", cfg.Date, LoadDateDefault)
	}
	return cfg, nil
}

// loadJobs returns the calls that load cfg (checked): items first, then
// each warehouse's tables in chunks of at most procs.LoadChunkMax rows.
func loadJobs(cfg LoadConfig) (items, warehouses []loadJob) {
	for from := 1; from <= cfg.Scale.Items; from += itemsPerTxn {
		items = append(items, loadJob{items: true, args: procs.LoadArgs{From: from, To: min(from+itemsPerTxn-1, cfg.Scale.Items)}})
	}
	for _, w := range cfg.Warehouses {
		base := procs.LoadArgs{W: w, Scale: cfg.Scale, Date: cfg.Date}
		a := base
		a.Table = procs.TableWarehouse
		warehouses = append(warehouses, loadJob{args: a})
		for _, t := range []struct {
			table string
			rows  int
		}{
			{procs.TableStock, cfg.Scale.Items},
			{procs.TableCustomer, cfg.Scale.CustomersPerDistrict},
			{procs.TableOrder, cfg.Scale.OrdersPerDistrict},
		} {
			chunk := procs.LoadChunkMax(t.table)
			for from := 1; from <= t.rows; from += chunk {
				a := base
				a.Table, a.From, a.To = t.table, from, min(from+chunk-1, t.rows)
				warehouses = append(warehouses, loadJob{args: a})
			}
		}
	}
	return items, warehouses
}

// Load writes the initial population of cfg.Warehouses through c: the
// items first, then every warehouse's tables, with cfg.Concurrency calls in
// flight. It refuses, before writing anything, when a warehouse was loaded
// already (has its procs.ScaleKey): the cluster must be empty, or hold only the
// rows of loads that did not finish. It stops at the first error, which
// names the warehouse and table, or the items, that failed.
func Load(ctx context.Context, c *client.Client, cfg LoadConfig) error {
	cfg, err := checkLoadConfig(cfg)
	if err != nil {
		return err
	}
	if err := checkNotLoaded(ctx, c, cfg.Warehouses); err != nil {
		return err
	}
	items, warehouses := loadJobs(cfg)
	p := &progress{total: len(items) + len(warehouses), report: cfg.Progress}
	// The items go first: new-order reads them, and they are the same
	// for every warehouse.
	if err := runJobs(ctx, c, cfg.Concurrency, items, p); err != nil {
		return err
	}
	if err := runJobs(ctx, c, cfg.Concurrency, warehouses, p); err != nil {
		return err
	}
	// Last, each warehouse's scale: a warehouse that has it is loaded
	// whole, and a run finds the population it must draw ids from.
	for _, w := range cfg.Warehouses {
		if err := c.Put(ctx, procs.ScaleKey(w), procs.Encode(cfg.Scale)); err != nil {
			return fmt.Errorf("gtpcc: load warehouse %d: scale: %w", w, err)
		}
	}
	return nil
}

// checkNotLoaded returns an error naming the first of warehouses that has
// its procs.ScaleKey, that is, was loaded whole already.
func checkNotLoaded(ctx context.Context, c *client.Client, warehouses []int) error {
	for _, w := range warehouses {
		_, found, err := c.Get(ctx, procs.ScaleKey(w))
		switch {
		case err != nil:
			return fmt.Errorf("gtpcc: load warehouse %d: read %s: %w", w, procs.ScaleKey(w), err)
		case found:
			return fmt.Errorf("gtpcc: load: warehouse %d is loaded already (%s exists): loading again would reset its counters "+
				"and keep the orders and history written since; start from an empty cluster", w, procs.ScaleKey(w))
		}
	}
	return nil
}

// progress counts the calls done and reports them, one at a time.
type progress struct {
	mu     sync.Mutex
	done   int
	total  int
	report func(done, total int)
}

func (p *progress) add() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
	if p.report != nil {
		p.report(p.done, p.total)
	}
}

// runJobs runs jobs with concurrency calls in flight; it returns the first
// error (and cancels the others) once every call in flight has returned.
func runJobs(ctx context.Context, c *client.Client, concurrency int, jobs []loadJob, p *progress) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	next := make(chan loadJob)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	for range min(concurrency, len(jobs)) {
		wg.Go(func() {
			for j := range next {
				if err := runJob(ctx, c, j); err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					continue // drain: the feeder stops at the cancel
				}
				p.add()
			}
		})
	}
feed:
	for _, j := range jobs {
		select {
		case next <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("gtpcc: load: %w", err)
	}
	return nil
}

// runJob runs one call of the loader.
func runJob(ctx context.Context, c *client.Client, j loadJob) error {
	var err error
	if j.items {
		err = putItems(ctx, c, j.args.From, j.args.To)
	} else {
		err = callLoad(ctx, c, procs.EncodeArgs(j.args))
	}
	if err != nil {
		return fmt.Errorf("gtpcc: load %s: %w", j, err)
	}
	return nil
}

// callLoad calls the load procedure with args, routed by its Keys.
func callLoad(ctx context.Context, c *client.Client, args []byte) error {
	keys, err := procs.ProcedureKeys(procs.ProcLoad, args)
	if err != nil {
		return err
	}
	_, err = c.Call(ctx, procs.ProcLoad, args, keys)
	return err
}

// putItems writes items from..to (at most itemsPerTxn) in one transaction.
func putItems(ctx context.Context, c *client.Client, from, to int) error {
	t := &txn.Txn{Then: make([]txn.Op, 0, to-from+1)}
	for i := from; i <= to; i++ {
		t.Then = append(t.Then, txn.Op{Kind: txn.OpPut, Key: procs.ItemKey(i), Value: procs.Encode(procs.ItemRow(i))})
	}
	_, err := c.Txn(ctx, t)
	return err
}
