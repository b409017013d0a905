package executor

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/multicast"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// readOnlyProc is a funcProc that says its calls write nothing.
type readOnlyProc struct{ funcProc }

func (readOnlyProc) ReadOnly() bool { return true }

// readRegistry has "look", a read-only call that reads w/0001/y, and
// "liar", which says it is read-only and writes w/0001/y.
func readRegistry(t *testing.T) *txn.Registry {
	t.Helper()
	r := txn.NewRegistry()
	look := readOnlyProc{funcProc{fixedKeys("w/0001/y"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
		v, found, err := p.Reader.Get([]byte("w/0001/y"))
		return txn.PieceResult{Succeeded: true, Results: []txn.OpResult{{Kind: txn.OpGet, Key: []byte("w/0001/y"), Found: found, Value: v}}}, err
	}}}
	liar := readOnlyProc{funcProc{fixedKeys("w/0001/y"), func(p *txn.ProcPiece) (txn.PieceResult, error) {
		return txn.PieceResult{Succeeded: true}, p.Writer.Put([]byte("w/0001/y"), []byte("lied"))
	}}}
	if err := r.Register("look", look); err != nil {
		t.Fatal(err)
	}
	if err := r.Register("liar", liar); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReadWaitsForQueuedWrites: a read at the leader of a key, a range or
// a compare that a queued delivery (waiting for a vote) may write waits
// (ErrReadWaits), a read of other keys goes ahead and sees the deliveries
// that ran ahead, and once the queue drains every read gets what the same
// transaction delivered at that point gets.
func TestReadWaitsForQueuedWrites(t *testing.T) {
	c := newCluster(t, readRegistry(t))
	c.seed(0, map[string]string{"w/0001/x": "old", "w/0001/y": "y0"})
	c.seed(2, map[string]string{"w/0004/flag": "on"})
	head := c.msg(1, remoteCompare) // writes w/0001/x once group 2 votes
	ahead := c.msg(2, `{"then":[{"op":"put","key":"w/0001/y","value":"y1"}]}`)
	c.deliver(0, head, ahead)
	if !c.hasResult(0, ahead) || c.hasResult(0, head) {
		t.Fatal("want the head queued and the put behind it run ahead")
	}
	ex := c.reps[0].ex
	read := func(js string) (string, error) {
		res, err := ex.Read(mustParse(t, js))
		return describeResult(res), err
	}
	for _, js := range []string{
		`{"then":[{"op":"get","key":"w/0001/x"}]}`,
		`{"then":[{"op":"scan","key":"w/0001/","end":"w/0002/","limit":10}]}`,
		`{"if":[{"key":"w/0001/x","cmp":"=","value":"old"}],"then":[{"op":"get","key":"w/0001/y"}]}`,
		`{"if":[{"key":"w/0001/y","cmp":"=","value":"y1"}],"then":[],"else":[{"op":"get","key":"w/0001/x"}]}`,
	} {
		if got, err := read(js); !errors.Is(err, ErrReadWaits) {
			t.Errorf("read %s behind a queued write of w/0001/x: %s, %v; want ErrReadWaits", js, got, err)
		}
	}
	if got, err := read(`{"then":[{"op":"get","key":"w/0001/y"},{"op":"get","key":"item/1"}]}`); err != nil || got != "succeeded true: 0:get w/0001/y=y1; 1:get item/1 missing" {
		t.Errorf("read of keys no queued delivery writes: %s, %v", got, err)
	}
	if _, err := ex.ReadCall(multicast.MsgID{Client: 3, Seq: 1}, txn.Call{Name: "look"}); !errors.Is(err, ErrReadWaits) {
		t.Errorf("call behind a queued delivery: %v, want ErrReadWaits (a call may read anything)", err)
	}
	checkScanView(t, ex, "w/0001/x=old w/0001/y=y1", ErrReadWaits)

	c.deliver(2, head)
	c.deliver(0) // group 2's vote: the head runs
	if st := ex.Stats(); st.Queued != 0 {
		t.Fatalf("queue holds %d after the vote", st.Queued)
	}
	checkScanView(t, ex, "w/0001/x=then w/0001/y=y1", nil)
	for i, js := range []string{
		`{"then":[{"op":"get","key":"w/0001/x"}]}`,
		`{"then":[{"op":"scan","key":"w/0001/","end":"w/0002/","limit":10}]}`,
		`{"if":[{"key":"w/0001/x","cmp":"=","value":"old"}],"then":[{"op":"get","key":"w/0001/y"}],"else":[{"op":"get","key":"w/0001/x"}]}`,
	} {
		got, err := read(js)
		if err != nil {
			t.Fatalf("read %s: %v", js, err)
		}
		m := c.msg(uint64(10+i), js)
		c.deliver(0, m)
		if want := describeResult(c.result(0, m)); got != want {
			t.Errorf("read %s at the leader: %s; delivered: %s", js, got, want)
		}
	}
	got, err := ex.ReadCall(multicast.MsgID{Client: 3, Seq: 2}, txn.Call{Name: "look"})
	m := c.callMsg(20, "look", "")
	c.deliver(0, m)
	if want := describeResult(c.result(0, m)); err != nil || describeResult(got) != want {
		t.Errorf("call at the leader: %s, %v; delivered: %s", describeResult(got), err, want)
	}
	before := c.data(0)
	if _, err := ex.ReadCall(multicast.MsgID{Client: 3, Seq: 3}, txn.Call{Name: "liar"}); !errors.Is(err, ErrNotReadOnly) {
		t.Errorf("a read-only call that writes: %v, want ErrNotReadOnly", err)
	}
	if _, err := ex.Read(mustParse(t, `{"then":[{"op":"put","key":"w/0001/y","value":"z"}]}`)); !errors.Is(err, txn.ErrInvalid) {
		t.Errorf("read of a transaction that writes: %v, want txn.ErrInvalid", err)
	}
	if _, err := ex.Read(mustParse(t, `{"then":[{"op":"get","key":"w/0003/a"}]}`)); err == nil {
		t.Errorf("read at group 0 of a key of group 1: no error")
	}
	if after := c.data(0); after != before {
		t.Errorf("reads changed the state: %s, was %s", after, before)
	}
}

// TestReadsDuringExecute: reads at the leader run while entries execute
// (the apply loop and the client calls are different goroutines); each
// entry writes one value to two keys, and every read of both sees them
// equal: a read sees the state between two entries, never one half
// committed. Run it with -race.
func TestReadsDuringExecute(t *testing.T) {
	c := newCluster(t, nil)
	const entries = 300
	ex := c.reps[0].ex
	both := mustParse(t, `{"then":[{"op":"get","key":"w/0001/a"},{"op":"get","key":"w/0002/b"}]}`)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				res, err := ex.Read(both)
				if err != nil {
					errs <- err
					return
				}
				a, b := res.Results[0], res.Results[1]
				if a.Found != b.Found || string(a.Value) != string(b.Value) {
					errs <- errors.New("read w/0001/a=" + string(a.Value) + ", w/0002/b=" + string(b.Value) + ": an entry half committed")
					return
				}
			}
		}()
	}
	for i := range entries {
		v := strconv.Itoa(i)
		c.deliver(0, c.msg(uint64(i+1), `{"then":[{"op":"put","key":"w/0001/a","value":"`+v+`"},{"op":"put","key":"w/0002/b","value":"`+v+`"}]}`))
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := c.data(partition.GroupID(0)); got != "w/0001/a=299 w/0002/b=299" {
		t.Errorf("group 0: %s", got)
	}
}

// TestReadTruncatesAsDelivered: a read at the leader whose result is larger
// than a stored result may be comes back truncated, as the same read
// delivered through the log does (the server turns that into OutOfRange or
// txn.ErrTruncated), not as an answer larger than a client receives.
func TestReadTruncatesAsDelivered(t *testing.T) {
	c := newCluster(t, nil)
	// 20 values of 60 KiB: more than kv.ValueMax (1 MiB) together.
	big := strings.Repeat("v", 60<<10)
	rows := map[string]string{}
	for i := range 20 {
		rows[fmt.Sprintf("w/0001/%02d", i)] = big
	}
	c.seed(0, rows)
	js := `{"then":[{"op":"scan","key":"w/0001/","end":"w/0002/","limit":100}]}`
	got, err := c.reps[0].ex.Read(mustParse(t, js))
	if err != nil {
		t.Fatal(err)
	}
	m := c.msg(1, js)
	c.deliver(0, m)
	want := c.result(0, m)
	if !want.Truncated || !got.Truncated || got.Succeeded != want.Succeeded || len(got.Results) != 0 {
		t.Errorf("read at the leader: truncated %v, succeeded %v, %d results; delivered: truncated %v, succeeded %v; want both truncated, without results",
			got.Truncated, got.Succeeded, len(got.Results), want.Truncated, want.Succeeded)
	}
}

// checkScanView: a scan view of w/0001/ is refused (ErrReadWaits) while a
// queued delivery may write there, though the store already holds the put
// that ran ahead of it (want, a scan of the view or of the store, when
// refused): no point of the order has that put without the queued write.
// A view of w/0002/, which nothing queued writes, is always given.
func checkScanView(t *testing.T, ex *Executor, want string, wantErr error) {
	t.Helper()
	show := func(kvs []kv.KV) string {
		var b []string
		for _, e := range kvs {
			b = append(b, string(e.Key)+"="+string(e.Value))
		}
		return strings.Join(b, " ")
	}
	v, err := ex.ScanView([]byte("w/0001/"), []byte("w/0002/"))
	if !errors.Is(err, wantErr) {
		t.Fatalf("scan view of w/0001/: %v, want %v", err, wantErr)
	}
	var kvs []kv.KV
	if err == nil {
		defer v.Release()
		kvs, _, err = v.ScanBytes([]byte("w/0001/"), []byte("w/0002/"), 10, 1<<20)
	} else {
		kvs, err = ex.cfg.Store.Scan([]byte("w/0001/"), []byte("w/0002/"), 10)
	}
	if err != nil || show(kvs) != want {
		t.Errorf("scan of w/0001/: %q, %v; want %q", show(kvs), err, want)
	}
	other, err := ex.ScanView([]byte("w/0002/"), []byte("w/0003/"))
	if err != nil {
		t.Fatalf("scan view of w/0002/, which nothing queued writes: %v", err)
	}
	other.Release()
}
