package loadgen

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestRunEachRequestOnce: every index is made exactly once, by workers
// in range, and the figures count them.
func TestRunEachRequestOnce(t *testing.T) {
	const clients, total = 7, 1000
	var mu sync.Mutex
	seen := make(map[int]int)
	res, err := Run(context.Background(), Config{Clients: clients, Total: total}, func(_ context.Context, w, i int) error {
		if w < 0 || w >= clients {
			return fmt.Errorf("worker %d out of range", w)
		}
		mu.Lock()
		seen[i]++
		mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != total || res.Errors != 0 || res.FirstError != nil || res.Stopped {
		t.Fatalf("result %+v, want %d requests, no errors, not stopped", res, total)
	}
	if got := res.Latency.TotalCount(); got != total {
		t.Fatalf("histogram holds %d latencies, want %d", got, total)
	}
	for i := range total {
		if seen[i] != 1 {
			t.Fatalf("request %d made %d times, want once", i, seen[i])
		}
	}
	if s := res.Summary(); s.RequestsPerS <= 0 || s.MaxMs < s.P50Ms {
		t.Fatalf("summary %+v: want requests/s > 0 and max >= p50", s)
	}
}

// TestRunErrors: failed requests are counted and left out of the
// histogram; ErrorsMax stops the run.
func TestRunErrors(t *testing.T) {
	odd := errors.New("odd")
	op := func(_ context.Context, _, i int) error {
		if i%2 == 1 {
			return odd
		}
		return nil
	}
	res, err := Run(context.Background(), Config{Clients: 1, Total: 10}, op)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 10 || res.Errors != 5 || !errors.Is(res.FirstError, odd) || res.Latency.TotalCount() != 5 {
		t.Fatalf("result %+v, want 10 requests, 5 errors (odd), 5 latencies", res)
	}
	res, err = Run(context.Background(), Config{Clients: 1, Total: 100, ErrorsMax: 3}, op)
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 6 || res.Errors != 3 || !res.Stopped {
		t.Fatalf("result %+v, want a stop after 6 requests and 3 errors", res)
	}
}

func TestRunBadConfig(t *testing.T) {
	nop := func(context.Context, int, int) error { return nil }
	for _, cfg := range []Config{{Clients: 0, Total: 1}, {Clients: ClientsMax + 1, Total: 1}, {Clients: 1, Total: 0}, {Clients: 1, Total: 1, ErrorsMax: -1}} {
		if _, err := Run(context.Background(), cfg, nop); err == nil {
			t.Errorf("Run(%+v): no error, want one", cfg)
		}
	}
}

func TestKeys(t *testing.T) {
	k := Keys{Prefix: []byte("w/0001/"), Size: 4}
	for _, tt := range []struct {
		i    int
		want string
	}{{0, "w/0001/0000"}, {42, "w/0001/0042"}, {9999, "w/0001/9999"}, {12345, "w/0001/2345"}} {
		if got := string(k.Key(tt.i)); got != tt.want {
			t.Errorf("Key(%d) = %q, want %q", tt.i, got, tt.want)
		}
	}
	if got, want := string(k.First())+" "+string(k.Last()), "w/0001/0000 w/0001/9999"; got != want {
		t.Errorf("First, Last = %q, want %q", got, want)
	}
	down := Keys{Prefix: []byte("p"), Size: 4, Descending: true}
	for _, tt := range []struct {
		i    int
		want string
	}{{0, "p9999"}, {1, "p9998"}, {42, "p9957"}, {9999, "p0000"}, {10000, "p9999"}} {
		if got := string(down.Key(tt.i)); got != tt.want {
			t.Errorf("descending Key(%d) = %q, want %q", tt.i, got, tt.want)
		}
	}
	if got, want := string((Keys{Size: 25, Descending: true}).Key(7)), "9999999999999999999999992"; got != want {
		t.Errorf("descending Key(7) of size 25 = %q, want %q", got, want)
	}
	wide := Keys{Size: 25}
	if got, want := string(wide.Key(7)), "0000000000000000000000007"; got != want {
		t.Errorf("Key(7) of size 25 = %q, want %q", got, want)
	}
	if err := (Keys{Size: 0}).Validate(); err == nil {
		t.Error("size 0: no error, want one")
	}
}
