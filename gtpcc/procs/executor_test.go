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

// TestExecutorRemoteWarehouseNotLoaded runs the procedures on the real
// executor of two groups, warehouse 1 at group 0 (loaded) and warehouse 2
// at group 1 (not loaded): a new-order with a line from warehouse 2 and a
// payment by one of its customers abort at both destinations with the
// same reason, though neither group sends a vote or waits for one, and
// write nothing; a call within warehouse 1 commits.
func TestExecutorRemoteWarehouseNotLoaded(t *testing.T) {
	scale := procs.Scale{Items: 10, CustomersPerDistrict: 5, OrdersPerDistrict: 5, NewOrdersPerDistrict: 2}
	r := newExecRig(t, scale)
	call, run := r.call, r.run
	for _, table := range []string{procs.TableWarehouse, procs.TableStock, procs.TableCustomer, procs.TableOrder} {
		to := map[string]int{procs.TableStock: scale.Items, procs.TableCustomer: scale.CustomersPerDistrict, procs.TableOrder: scale.OrdersPerDistrict}[table]
		for _, res := range run(call(procs.ProcLoad, procs.LoadArgs{W: 1, Table: table, From: 1, To: to, Scale: scale, Date: 1})) {
			if !res.Succeeded {
				t.Fatalf("load warehouse 1 %s: %+v", table, res)
			}
		}
	}
	for _, tc := range []struct {
		name string
		m    multicast.Message
		want string
	}{
		{"new-order", call(procs.ProcNewOrder, procs.NewOrderArgs{W: 1, D: 1, C: 1, EntryD: 1, Lines: []procs.NewOrderLine{
			{Item: 1, SupplyW: 1, Quantity: 1}, {Item: 2, SupplyW: 2, Quantity: 1},
		}}), `txn: procedure "gtpcc.new_order": gtpcc: gtpcc.new_order: warehouse 2 is not loaded (no item/scale/0002)`},
		{"payment", call(procs.ProcPayment, procs.PaymentArgs{W: 1, D: 1, CW: 2, CD: 1, CID: 1, Amount: 100, Date: 1}),
			`txn: procedure "gtpcc.payment": gtpcc: gtpcc.payment: warehouse 2 is not loaded (no item/scale/0002)`},
	} {
		if tc.m.Dst != partition.SetOf(0, 1) {
			t.Fatalf("%s: destinations %s, want both groups", tc.name, tc.m.Dst)
		}
		for i, res := range run(tc.m) {
			if !res.Aborted || res.Reason != tc.want {
				t.Errorf("%s: group %d: %+v, want aborted: %s", tc.name, i, res, tc.want)
			}
		}
	}
	var d procs.District
	v, _, err := r.reps[0].store.Get(procs.DistrictKey(1, 1))
	if err != nil || procs.Decode(procs.DistrictKey(1, 1), v, &d) != nil || d.NextOID != scale.OrdersPerDistrict+1 || d.YTD != int64(scale.CustomersPerDistrict)*1000 {
		t.Errorf("district 1 of warehouse 1 after the aborted calls: %+v, %v: want it as loaded", d, err)
	}
	local := call(procs.ProcNewOrder, procs.NewOrderArgs{W: 1, D: 1, C: 1, EntryD: 1, Lines: []procs.NewOrderLine{{Item: 1, SupplyW: 1, Quantity: 1}}})
	if res := run(local); !res[0].Succeeded {
		t.Errorf("new-order within warehouse 1: %+v", res[0])
	}
	for g, rep := range r.reps {
		if st := rep.ex.Stats(); st.VotesSent != 0 || st.VotesStored != 0 || st.Queued != 0 {
			t.Errorf("group %d: stats %+v, want no vote sent, stored or waited for", g, st)
		}
	}
}

// execRig is two groups of one replica each, with the real executor:
// warehouse 1 at group 0, warehouse 2 at group 1, and the replicated items
// and the scale of warehouse 1 only at both, as the loader writes them.
type execRig struct {
	t    *testing.T
	top  *partition.Topology
	pm   *partition.PartitionMap
	reg  *txn.Registry
	reps []*execReplica
	seq  uint64 // of the last call
}

// execReplica is one group's replica: its store, its executor and the last
// index applied.
type execReplica struct {
	store *kv.Store
	ex    *executor.Executor
	index uint64
}

// newExecRig opens the two groups, their stores loaded with scale's items
// and warehouse 1's scale; the stores close when t ends.
func newExecRig(t *testing.T, scale procs.Scale) *execRig {
	top, err := partition.NewTopology(partition.Spec{Groups: []partition.Group{{Name: "a"}, {Name: "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	pm, err := partition.NewPartitionMap(top, []partition.Partition{
		{Name: "item", Start: []byte("item/"), End: []byte("item0"), Group: partition.NoGroup, Replicated: true},
		{Name: "w0001", Start: procs.WarehousePrefix(1), End: procs.WarehouseEnd(1), Group: 0},
		{Name: "w0002", Start: procs.WarehousePrefix(2), End: procs.WarehouseEnd(2), Group: 1},
	})
	if err != nil {
		t.Fatal(err)
	}
	rig := &execRig{t: t, top: top, pm: pm, reg: procs.Registry()}
	for g := range top.Len() {
		rig.reps = append(rig.reps, rig.openReplica(partition.GroupID(g), scale))
	}
	return rig
}

// openReplica opens group g's replica and writes the replicated range.
func (rig *execRig) openReplica(g partition.GroupID, scale procs.Scale) *execReplica {
	t := rig.t
	s, err := kv.Open(kv.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close store of group %d: %v", g, err)
		}
	})
	ex, err := executor.NewExecutor(executor.Config{Store: s, Partitions: rig.pm, Topology: rig.top, Self: g, Procedures: rig.reg})
	if err != nil {
		t.Fatal(err)
	}
	r := &execReplica{store: s, ex: ex}
	// The replicated range, as the loader writes it: the items, and
	// the scale of warehouse 1 only.
	b := s.NewBatch()
	for i := 1; i <= scale.Items; i++ {
		if err := b.Put(procs.ItemKey(i), procs.Encode(procs.ItemRow(i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Put(procs.ScaleKey(1), procs.Encode(scale)); err != nil {
		t.Fatal(err)
	}
	r.index++
	if err := s.Commit(b, r.index); err != nil {
		t.Fatal(err)
	}
	b.Close()
	return r
}

// call is the message of a call of procedure name with args, to the
// destinations the registry gives it.
func (rig *execRig) call(name string, args any) multicast.Message {
	rig.t.Helper()
	rig.seq++
	c := txn.Call{Name: name, Args: procs.EncodeArgs(args)}
	dst, err := rig.reg.Destinations(c, rig.pm, rig.top, 0)
	if err != nil {
		rig.t.Fatal(err)
	}
	return multicast.Message{ID: multicast.MsgID{Client: 3, Seq: rig.seq}, Dst: dst, Payload: txn.AppendCallPayload(nil, c)}
}

// run delivers m to each of its destinations, which must answer at once,
// without a vote, and returns their results.
func (rig *execRig) run(m multicast.Message) []txn.PieceResult {
	t := rig.t
	t.Helper()
	var out []txn.PieceResult
	for _, g := range m.Dst.Slice() {
		r := rig.reps[g]
		r.index++
		sends, err := r.ex.Execute(r.index, group.Clock{}, []multicast.Message{m}, nil)
		if err != nil {
			t.Fatal(err)
		}
		res, ok, err := r.ex.Result(m.ID)
		if err != nil || !ok || len(sends) != 0 {
			t.Fatalf("group %d: result %+v (found %v, %v), sends %+v: want a result at once and no vote", g, res, ok, err, sends)
		}
		out = append(out, res)
	}
	return out
}

// TestReadOnlyProceduresAtLeader: order-status and stock-level are
// read-only (txn.ReadOnly), so a leader serves a call of one warehouse on
// its applied state (executor.ReadCall, DESIGN 6.5): the answer is the one
// the call delivered through the log gets at the same state, and the read
// writes nothing. Delivery, which writes, is not read-only.
func TestReadOnlyProceduresAtLeader(t *testing.T) {
	scale := procs.Scale{Items: 10, CustomersPerDistrict: 5, OrdersPerDistrict: 5, NewOrdersPerDistrict: 2}
	r := newExecRig(t, scale)
	for _, table := range []string{procs.TableWarehouse, procs.TableStock, procs.TableCustomer, procs.TableOrder} {
		to := map[string]int{procs.TableStock: scale.Items, procs.TableCustomer: scale.CustomersPerDistrict, procs.TableOrder: scale.OrdersPerDistrict}[table]
		for _, res := range r.run(r.call(procs.ProcLoad, procs.LoadArgs{W: 1, Table: table, From: 1, To: to, Scale: scale, Date: 1})) {
			if !res.Succeeded {
				t.Fatalf("load warehouse 1 %s: %+v", table, res)
			}
		}
	}
	if res := r.run(r.call(procs.ProcNewOrder, procs.NewOrderArgs{W: 1, D: 1, C: 2, EntryD: 2, Lines: []procs.NewOrderLine{
		{Item: 3, SupplyW: 1, Quantity: 9}, {Item: 4, SupplyW: 1, Quantity: 2},
	}})); !res[0].Succeeded {
		t.Fatalf("new-order: %+v", res[0])
	}
	for name, args := range map[string]any{ //flexkv:unordered each call is checked on its own
		procs.ProcOrderStatus: procs.OrderStatusArgs{W: 1, D: 1, CID: 2},
		procs.ProcStockLevel:  procs.StockLevelArgs{W: 1, D: 1, Threshold: 95},
	} {
		proc, _ := r.reg.Lookup(name)
		if !txn.IsReadOnly(proc) {
			t.Errorf("%s is not read-only", name)
		}
		m := r.call(name, args)
		before, _ := r.reps[0].store.Scan(procs.WarehousePrefix(1), procs.WarehouseEnd(1), txn.ScanLimitMax)
		got, err := r.reps[0].ex.ReadCall(m.ID, txn.Call{Name: name, Args: procs.EncodeArgs(args)})
		if err != nil {
			t.Fatalf("%s at the leader: %v", name, err)
		}
		after, _ := r.reps[0].store.Scan(procs.WarehousePrefix(1), procs.WarehouseEnd(1), txn.ScanLimitMax)
		if len(after) != len(before) {
			t.Errorf("%s at the leader changed warehouse 1: %d rows, were %d", name, len(after), len(before))
		}
		want := r.run(m)[0]
		if !got.Succeeded || len(got.Results) != 1 || len(want.Results) != 1 || string(got.Results[0].Value) != string(want.Results[0].Value) {
			t.Errorf("%s: at the leader %+v, delivered %+v", name, got, want)
		}
	}
	if proc, _ := r.reg.Lookup(procs.ProcDelivery); txn.IsReadOnly(proc) {
		t.Errorf("%s, which writes, says it is read-only", procs.ProcDelivery)
	}
}
