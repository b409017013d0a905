package procs

import "github.com/flexkv/flexkv/txn"

// namedProc is a procedure and the name it is registered under.
type namedProc struct {
	name string
	proc txn.Procedure
}

// procedures are the gTPC-C procedures.
var procedures = []namedProc{
	{ProcNewOrder, newOrderProc{}},
	{ProcPayment, paymentProc{}},
	{ProcOrderStatus, orderStatusProc{}},
	{ProcDelivery, deliveryProc{}},
	{ProcStockLevel, stockLevelProc{}},
	{ProcLoad, loadProc{}},
}

// Register registers the gTPC-C procedures in r. Every server of a cluster
// that runs gTPC-C must register them (flexkv server and flexkv local do).
func Register(r *txn.Registry) error {
	for _, p := range procedures {
		if err := r.Register(p.name, p.proc); err != nil {
			return err
		}
	}
	return nil
}

// Registry returns a registry holding the gTPC-C procedures.
func Registry() *txn.Registry {
	r := txn.NewRegistry()
	if err := Register(r); err != nil {
		// The names are constants that Register accepts.
		panic(err)
	}
	return r
}
