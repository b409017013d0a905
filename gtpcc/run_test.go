package gtpcc

import (
	"context"
	"testing"
	"time"

	"github.com/flexkv/flexkv/gtpcc/procs"
)

// TestRunOnCluster runs the workload on a real cluster, under each
// protocol, with only global transactions on one warehouse per group (every
// transaction multicast to two or three groups), then checks the TPC-C
// consistency conditions: what every protocol must keep, whatever order it
// delivers in.
func TestRunOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster run")
	}
	for _, proto := range []string{"flexcast", "skeen", "tree"} {
		t.Run(proto, func(t *testing.T) {
			c, _ := startCluster(t, proto)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			scale := procs.Scale{Items: 200, CustomersPerDistrict: 30, OrdersPerDistrict: 30, NewOrdersPerDistrict: 9}
			ws := []int{1, 3, 5}
			if err := Load(ctx, c, LoadConfig{Warehouses: ws, Scale: scale}); err != nil {
				t.Fatal(err)
			}
			wl := DefaultWorkload(ws, scale)
			wl.GlobalOnly = true
			wl.RemoteItem = 0.2
			specs, err := ClientsPerWarehouse(ws, 4, func(int, int) (Caller, error) { return c, nil })
			if err != nil {
				t.Fatal(err)
			}
			rep, err := Run(ctx, RunConfig{Protocol: proto, Workload: wl, Clients: specs, Duration: 3 * time.Second, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Errors > 0 || rep.TxnTotal < 50 {
				t.Errorf("%d transactions, %d errors (%v): the run proves little", rep.TxnTotal, rep.Errors, rep.ErrorSamples)
			}
			if n := rep.Latency.Get("2nd").Count; n < rep.TxnTotal/2 {
				t.Errorf("%d of %d transactions had a second destination, want every one but rollbacks", n, rep.TxnTotal)
			}
			cr, err := Check(ctx, c, ws)
			if err != nil {
				t.Fatal(err)
			}
			if !cr.Passed {
				t.Errorf("consistency after %d transactions under %s: %v", rep.TxnTotal, proto, cr.Failures)
			}
		})
	}
}
