package procs_test

import (
	"testing"

	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/group"
	"github.com/flexkv/flexkv/gtpcc/procs"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// benchGroup is one group holding warehouses 1 and 2 and the replicated
// item range, on the real executor over a store on disk (not synced, as a
// replica's: raft's log is the one synced), loaded at procs.Small. On
// Pebble's in-memory file system the files' growth (the log's, the
// tables') made half of what the benchmarks allocated.
type benchGroup struct {
	reg   *txn.Registry
	pm    *partition.PartitionMap
	top   *partition.Topology
	store *kv.Store
	ex    *executor.Executor
	index uint64
	seq   uint64
}

func newBenchGroup(b *testing.B) *benchGroup {
	b.Helper()
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}}})
	if err != nil {
		b.Fatal(err)
	}
	pm, err := partition.NewPartitionMap(top, []partition.Partition{
		{Name: "item", Start: []byte("item/"), End: []byte("item0"), Group: partition.NoGroup, Replicated: true},
		{Name: "w", Start: procs.WarehousePrefix(1), End: procs.WarehouseEnd(2), Group: 0},
	})
	if err != nil {
		b.Fatal(err)
	}
	s, err := kv.Open(kv.Options{Dir: b.TempDir(), NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Errorf("close store: %v", err)
		}
	})
	reg := procs.Registry()
	ex, err := executor.NewExecutor(executor.Config{Store: s, Partitions: pm, Topology: top, Self: 0, Procedures: reg})
	if err != nil {
		b.Fatal(err)
	}
	g := &benchGroup{reg: reg, pm: pm, top: top, store: s, ex: ex}
	scale := procs.Small
	batch := s.NewBatch()
	for i := 1; i <= scale.Items; i++ {
		if err := batch.Put(procs.ItemKey(i), procs.Encode(procs.ItemRow(i))); err != nil {
			b.Fatal(err)
		}
	}
	g.index++
	if err := s.Commit(batch, g.index); err != nil {
		b.Fatal(err)
	}
	batch.Close()
	for w := 1; w <= 2; w++ {
		for _, table := range []string{procs.TableWarehouse, procs.TableStock, procs.TableCustomer, procs.TableOrder} {
			rows := map[string]int{procs.TableWarehouse: 1, procs.TableStock: scale.Items,
				procs.TableCustomer: scale.CustomersPerDistrict, procs.TableOrder: scale.OrdersPerDistrict}[table]
			chunk := procs.LoadChunkMax(table)
			for from := 1; from <= rows; from += chunk {
				to := min(from+chunk-1, rows)
				res := g.run(b, procs.ProcLoad, procs.LoadArgs{W: w, Table: table, From: from, To: to, Scale: scale, Date: 1})
				if !res.Succeeded {
					b.Fatalf("load warehouse %d %s %d..%d: %+v", w, table, from, to, res)
				}
			}
		}
		batch := s.NewBatch()
		if err := batch.Put(procs.ScaleKey(w), procs.Encode(scale)); err != nil {
			b.Fatal(err)
		}
		g.index++
		if err := s.Commit(batch, g.index); err != nil {
			b.Fatal(err)
		}
		batch.Close()
	}
	return g
}

// message returns the message of a call to proc with args.
func (g *benchGroup) message(b *testing.B, proc string, args any) multicast.Message {
	b.Helper()
	g.seq++
	c := txn.Call{Name: proc, Args: procs.EncodeArgs(args)}
	dst, err := g.reg.Destinations(c, g.pm, g.top, 0)
	if err != nil {
		b.Fatal(err)
	}
	return multicast.Message{ID: multicast.MsgID{Client: 3, Seq: g.seq}, Dst: dst, Payload: txn.AppendCallPayload(nil, c)}
}

// execute executes m in an entry of its own and returns its result.
func (g *benchGroup) execute(b *testing.B, m multicast.Message) txn.PieceResult {
	g.index++
	if _, err := g.ex.Execute(g.index, group.Clock{}, []multicast.Message{m}, nil); err != nil {
		b.Fatal(err)
	}
	res, ok, err := g.ex.Result(m.ID)
	if err != nil || !ok {
		b.Fatalf("result of %s: %v (found %v)", m.ID, err, ok)
	}
	return res
}

func (g *benchGroup) run(b *testing.B, proc string, args any) txn.PieceResult {
	return g.execute(b, g.message(b, proc, args))
}

// benchLoop executes m once per iteration, under a new id, and fails
// unless every piece succeeds.
func benchLoop(b *testing.B, g *benchGroup, m multicast.Message) {
	b.ReportAllocs()
	for b.Loop() {
		g.seq++
		m.ID.Seq = g.seq
		if res := g.execute(b, m); !res.Succeeded {
			b.Fatalf("%+v", res)
		}
	}
}

// BenchmarkNewOrderPiece executes a ten-line new-order of warehouse 1,
// one line supplied by warehouse 2 (both at the group): one piece that
// reads and writes the home rows and ten stock rows.
func BenchmarkNewOrderPiece(b *testing.B) {
	g := newBenchGroup(b)
	a := procs.NewOrderArgs{W: 1, D: 3, C: 42, EntryD: 1}
	for i := range 10 {
		a.Lines = append(a.Lines, procs.NewOrderLine{Item: 1 + i*97, SupplyW: 1 + i/9, Quantity: 1 + i%5})
	}
	benchLoop(b, g, g.message(b, procs.ProcNewOrder, a))
}

// BenchmarkPaymentPiece executes a payment of warehouse 1 by a customer
// of warehouse 2 named by id (both at the group).
func BenchmarkPaymentPiece(b *testing.B) {
	g := newBenchGroup(b)
	a := procs.PaymentArgs{W: 1, D: 3, CW: 2, CD: 5, CID: 42, Amount: 1234, Date: 1}
	benchLoop(b, g, g.message(b, procs.ProcPayment, a))
}

// BenchmarkPaymentByNamePiece is BenchmarkPaymentPiece with the customer
// named by last name: a scan of the name index first.
func BenchmarkPaymentByNamePiece(b *testing.B) {
	g := newBenchGroup(b)
	a := procs.PaymentArgs{W: 1, D: 3, CW: 1, CD: 5, CLast: procs.LastName(7), Amount: 1234, Date: 1}
	benchLoop(b, g, g.message(b, procs.ProcPayment, a))
}

// BenchmarkDeliveryPiece executes a delivery of warehouse 1, each after a
// new-order in every district of it (not timed): every delivery delivers
// ten orders, and finds each district's oldest one past the new-order
// rows that the deliveries before it deleted.
func BenchmarkDeliveryPiece(b *testing.B) {
	g := newBenchGroup(b)
	var orders []multicast.Message
	for d := 1; d <= procs.DistrictsPerWarehouse; d++ {
		a := procs.NewOrderArgs{W: 1, D: d, C: 42, EntryD: 1}
		for i := range 10 {
			a.Lines = append(a.Lines, procs.NewOrderLine{Item: 1 + i*97, SupplyW: 1, Quantity: 1 + i%5})
		}
		orders = append(orders, g.message(b, procs.ProcNewOrder, a))
	}
	delivery := g.message(b, procs.ProcDelivery, procs.DeliveryArgs{W: 1, Carrier: 3, Date: 2})
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for _, m := range orders {
			g.seq++
			m.ID.Seq = g.seq
			if res := g.execute(b, m); !res.Succeeded {
				b.Fatalf("%+v", res)
			}
		}
		b.StartTimer()
		g.seq++
		delivery.ID.Seq = g.seq
		if res := g.execute(b, delivery); !res.Succeeded {
			b.Fatalf("%+v", res)
		}
	}
}

// BenchmarkStockLevelPiece executes a stock-level of district 3 of
// warehouse 1: a scan of its last 20 orders' lines (about 200 of the
// loaded population) and a read of each distinct item's stock row.
func BenchmarkStockLevelPiece(b *testing.B) {
	g := newBenchGroup(b)
	benchLoop(b, g, g.message(b, procs.ProcStockLevel, procs.StockLevelArgs{W: 1, D: 3, Threshold: 15}))
}
