package procs

import (
	"fmt"

	"github.com/flexkv/flexkv/txn"
)

// customerDataMax is the length of C_DATA (clause 1.3.1).
const customerDataMax = 500

// paymentProc is payment (TPC-C clause 2.5): the home group adds the
// amount to the warehouse and district and writes the history row; the
// group of the customer's warehouse charges the customer and writes the
// payment's CustomerPayment record.
type paymentProc struct{}

// CustomerPayment is the customer-side record of a payment, at
// CustomerPaymentKey(CW, id) where id is the payment's transaction id, as
// its history row's HistoryKey(W, id). TPC-C has no such row: the history
// row is written at the home warehouse, which may belong to another group
// than the customer's, and may not know the customer's id (named by last
// name). This record lets a check match the customer's piece of every
// payment with the home piece (Check's condition g2) and sum a customer's
// payments (conditions 10 and 12) within the customer's warehouse.
type CustomerPayment struct {
	CD     int   `json:"c_d"`
	CID    int   `json:"c_id"` // resolved, also when named by last name
	W      int   `json:"w"`    // the home warehouse, paid to
	D      int   `json:"d"`
	Amount int64 `json:"amount_cents"`
	Date   int64 `json:"date_ms"`
}

var (
	_ txn.Procedure  = paymentProc{}
	_ txn.PieceVotes = paymentProc{}
)

// AllOrNothing makes a call commit at every destination or at none.
func (paymentProc) AllOrNothing() bool { return true }

// CanAbort is false: every piece decides alike whether the call aborts
// (see procs.go, All or nothing, without votes), and none votes.
func (paymentProc) CanAbort(*txn.CallPiece) bool { return false }

// Keys returns the home warehouse's key and the customer warehouse's.
func (paymentProc) Keys(args []byte) ([][]byte, error) {
	a, err := parsePayment(args)
	if err != nil {
		return nil, err
	}
	return appendKey([][]byte{WarehouseKey(a.W)}, WarehouseKey(a.CW)), nil
}

// Run runs one group's piece: the home part if it owns warehouse W, the
// customer part if it owns warehouse CW, both if it owns both.
func (paymentProc) Run(p *txn.ProcPiece) (txn.PieceResult, error) {
	a, err := parsePayment(p.Args)
	if err != nil {
		return txn.PieceResult{}, err
	}
	r := procRows{p: p, proc: ProcPayment}
	// Every group checks, in the replicated range, that both warehouses
	// are loaded and the customer exists, alike at every destination.
	scales, err := r.warehouseScales(a.W, a.CW)
	if err != nil {
		return txn.PieceResult{}, err
	}
	if err := r.checkCustomerLoaded(a.CW, a.CD, a.CID, a.CLast, scales(a.CW)); err != nil {
		return txn.PieceResult{}, err
	}
	var (
		cust    Customer
		custKey []byte
		cid     = a.CID
	)
	ownsCustomer := p.Owns(WarehouseKey(a.CW))
	if ownsCustomer {
		if cid, custKey, cust, err = r.customer(a.CW, a.CD, a.CID, a.CLast); err != nil {
			return txn.PieceResult{}, err
		}
	}
	res := txn.PieceResult{Succeeded: true}
	if p.Owns(WarehouseKey(a.W)) {
		o, err := r.paymentHome(&a, cid)
		if err != nil {
			return txn.PieceResult{}, err
		}
		res.Results = append(res.Results, o)
	}
	if ownsCustomer {
		o, err := r.paymentCustomer(&a, cid, custKey, &cust)
		if err != nil {
			return txn.PieceResult{}, err
		}
		res.Results = append(res.Results, o)
	}
	return res, nil
}

// paymentHome adds the payment to the home warehouse's and district's
// year-to-date and writes the history row, under the call's id. cid is the
// customer's id, or 0 when this group cannot know it (named by last name
// at a warehouse it does not own): the row records the last name instead.
func (r procRows) paymentHome(a *PaymentArgs, cid int) (txn.OpResult, error) {
	var (
		wh   Warehouse
		dist District
	)
	whKey, distKey := WarehouseKey(a.W), DistrictKey(a.W, a.D)
	if err := r.must(whKey, &wh); err != nil {
		return txn.OpResult{}, err
	}
	if err := r.must(distKey, &dist); err != nil {
		return txn.OpResult{}, err
	}
	wh.YTD += a.Amount
	dist.YTD += a.Amount
	if err := r.put(whKey, &wh); err != nil {
		return txn.OpResult{}, err
	}
	if err := r.put(distKey, &dist); err != nil {
		return txn.OpResult{}, err
	}
	h := History{
		CID: cid, CD: a.CD, CW: a.CW, D: a.D, W: a.W,
		Date: a.Date, Amount: a.Amount,
		Data: wh.Name + "    " + dist.Name, // clause 2.5.2.2: W_NAME, 4 spaces, D_NAME
	}
	if cid == 0 {
		h.CLast = a.CLast
	}
	key := HistoryKey(a.W, r.p.ID.String())
	if err := r.put(key, &h); err != nil {
		return txn.OpResult{}, err
	}
	return txn.OpResult{Index: IndexHome, Kind: txn.OpPut, Key: key}, nil
}

// paymentCustomer charges customer cid (row c at key), writes the
// payment's CustomerPayment record and returns the PaymentOutput.
func (r procRows) paymentCustomer(a *PaymentArgs, cid int, key []byte, c *Customer) (txn.OpResult, error) {
	c.Balance -= a.Amount
	c.YTDPayment += a.Amount
	c.PaymentCnt++
	if err := r.put(key, c); err != nil {
		return txn.OpResult{}, err
	}
	if c.Credit == "BC" {
		// Clause 2.5.2.2: the ids and the amount, before the old data,
		// keeping the first 500 characters.
		var data CustomerData
		dataKey := CustomerDataKey(a.CW, a.CD, cid)
		if err := r.must(dataKey, &data); err != nil {
			return txn.OpResult{}, err
		}
		entry := fmt.Sprintf("%d %d %d %d %d %d|", cid, a.CD, a.CW, a.D, a.W, a.Amount)
		data.Data = truncateRunes(entry+data.Data, customerDataMax)
		if err := r.put(dataKey, &data); err != nil {
			return txn.OpResult{}, err
		}
	}
	rec := CustomerPayment{CD: a.CD, CID: cid, W: a.W, D: a.D, Amount: a.Amount, Date: a.Date}
	if err := r.put(CustomerPaymentKey(a.CW, r.p.ID.String()), &rec); err != nil {
		return txn.OpResult{}, err
	}
	out := PaymentOutput{CW: a.CW, CD: a.CD, CID: cid, Credit: c.Credit, BalanceCents: c.Balance}
	return output(IndexCustomer, key, &out), nil
}
