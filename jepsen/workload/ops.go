package workload

import (
	"context"
	"fmt"
	"strconv"

	"github.com/flexkv/flexkv/jepsen/history"
	"github.com/flexkv/flexkv/txn"
)

// appendPercent is the share of a transaction's micro-operations that
// append.
const appendPercent = 50

// listTxn builds the transaction of mops (see the package comment): then[i]
// is the index in Then of mops[i], and newValue the value each append key
// holds if it commits.
func (wk *worker) listTxn(mops []history.Mop) (t *txn.Txn, then []int, newValue map[string]string) {
	t = &txn.Txn{}
	newValue = map[string]string{}
	for _, m := range mops {
		k := []byte(m.Key)
		then = append(then, len(t.Then))
		if m.F != history.MopAppend {
			t.Then = append(t.Then, txn.Op{Kind: txn.OpGet, Key: k})
			continue
		}
		old := wk.sh.last(m.Key)
		next := strconv.FormatInt(m.Int, 10)
		if old != "" {
			next = old + "," + next
		}
		newValue[m.Key] = next
		t.If = append(t.If, txn.Compare{Key: k, Cmp: txn.CmpEqual, Value: []byte(old)})
		t.Then = append(t.Then, txn.Op{Kind: txn.OpPut, Key: k, Value: []byte(next)})
		t.Else = append(t.Else, txn.Op{Kind: txn.OpGet, Key: k})
	}
	return t, then, newValue
}

// txn runs one list-append transaction and records it.
func (wk *worker) txn(ctx context.Context) (history.Type, error) {
	return wk.run(ctx, wk.sh.pick(wk.rng, 1+wk.rng.IntN(wk.cfg.MopsMax), appendPercent))
}

// run runs the list-append transaction of mops and records it.
func (wk *worker) run(ctx context.Context, mops []history.Mop) (history.Type, error) {
	t, then, newValue := wk.listTxn(mops)
	if err := wk.record(history.Invoke, history.FTxn, mops); err != nil {
		return "", err
	}
	octx, cancel := wk.opContext(ctx)
	res, err := wk.cfg.Client.Txn(octx, t)
	cancel()
	if err != nil {
		typ := outcome(err)
		return typ, wk.record(typ, history.FTxn, mops)
	}
	byIndex := map[int]txn.OpResult{}
	for _, r := range res.Results {
		byIndex[r.Index] = r
	}
	if !res.Succeeded {
		// A list changed under us: nothing was written; learn the lists.
		for i, op := range t.Else {
			if r, ok := byIndex[i]; ok && r.Kind == txn.OpGet {
				wk.sh.saw(string(op.Key), string(r.Value))
			}
		}
		return history.Fail, wk.record(history.Fail, history.FTxn, mops)
	}
	done := make([]history.Mop, len(mops))
	for i, m := range mops {
		done[i] = m
		if m.F == history.MopAppend {
			wk.sh.saw(m.Key, newValue[m.Key])
			continue
		}
		r, ok := byIndex[then[i]]
		if !ok || r.Kind != txn.OpGet {
			return "", fmt.Errorf("workload: %s: no result for the get of %q", res.ID, m.Key)
		}
		list, err := decodeList(r.Value)
		if err != nil {
			return "", fmt.Errorf("workload: %s: %w", res.ID, err)
		}
		wk.sh.saw(m.Key, string(r.Value))
		done[i] = history.ReadList(m.Key, list)
	}
	return history.OK, wk.record(history.OK, history.FTxn, done)
}

// register writes a fresh value to, or reads, one register.
func (wk *worker) register(ctx context.Context) (history.Type, error) {
	write := wk.rng.IntN(2) == 0
	key, v := wk.sh.register(wk.rng, write)
	if write {
		m := history.Mop{F: history.MopWrite, Key: key, Int: v}
		if err := wk.record(history.Invoke, history.FRegister, []history.Mop{m}); err != nil {
			return "", err
		}
		octx, cancel := wk.opContext(ctx)
		err := wk.cfg.Client.Put(octx, []byte(key), []byte(strconv.FormatInt(m.Int, 10)))
		cancel()
		typ := history.OK
		if err != nil {
			typ = outcome(err)
		}
		return typ, wk.record(typ, history.FRegister, []history.Mop{m})
	}
	m := history.Mop{F: history.MopRead, Key: key, Null: true}
	if err := wk.record(history.Invoke, history.FRegister, []history.Mop{m}); err != nil {
		return "", err
	}
	octx, cancel := wk.opContext(ctx)
	got, found, err := wk.cfg.Client.Get(octx, []byte(key))
	cancel()
	if err != nil {
		// A read has no effect: one that did not answer failed.
		return history.Fail, wk.record(history.Fail, history.FRegister, []history.Mop{m})
	}
	done := history.Mop{F: history.MopRead, Key: key, Null: !found}
	if found {
		n, err := strconv.ParseInt(string(got), 10, 64)
		if err != nil {
			return "", fmt.Errorf("workload: register %q holds %q, not an integer", key, got)
		}
		done.Int = n
	}
	return history.OK, wk.record(history.OK, history.FRegister, []history.Mop{done})
}
