// Package loadgen runs a closed-loop load, the way etcd's benchmark tool
// does: a fixed number of workers issue requests back to back until a total
// is done, and each request's latency goes into an HDR histogram. It knows
// nothing of FlexKV: the caller's Op makes request i. It also names the
// keys such a load writes and reads (Keys), so that a run of reads finds
// the keys a run of writes with the same settings made.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Bounds of a Config. ClientsMax bounds the goroutines of a run; TotalMax
// keeps request indexes well inside an int on every platform.
const (
	ClientsMax = 1 << 14
	TotalMax   = 1 << 30
)

// The histogram records microseconds from 1 us to an hour with 3
// significant digits (0.1% error), like the gTPC-C driver's: a longer
// request is recorded as an hour.
const (
	latencyUsMin    = 1
	latencyUsMax    = int64(time.Hour / time.Microsecond)
	latencySigFigs  = 3
	usPerMs         = 1000.0
	quantileP50     = 50
	quantileP90     = 90
	quantileP99     = 99
	quantileP999    = 99.9
	roundMsDecimals = 1000 // latencies in ms to the microsecond
	roundRPSDecimal = 10   // requests/s to a tenth
)

// Config sets the size of a run.
type Config struct {
	// Clients is the number of workers, each with one request in flight:
	// 1..ClientsMax.
	Clients int
	// Total is the number of requests to make: 1..TotalMax.
	Total int
	// ErrorsMax, when more than 0, stops the run once that many requests
	// have failed: against a cluster that went away, every request would
	// otherwise wait for its own deadline. The requests in flight finish.
	ErrorsMax int
}

// Validate reports the first bad field of c.
func (c Config) Validate() error {
	switch {
	case c.Clients < 1 || c.Clients > ClientsMax:
		return fmt.Errorf("loadgen: %d clients, want 1..%d", c.Clients, ClientsMax)
	case c.Total < 1 || c.Total > TotalMax:
		return fmt.Errorf("loadgen: total %d, want 1..%d", c.Total, TotalMax)
	case c.ErrorsMax < 0:
		return fmt.Errorf("loadgen: errors max %d, want >= 0 (0: no limit)", c.ErrorsMax)
	}
	return nil
}

// Op makes request i (0 <= i < Config.Total), each i exactly once, on
// behalf of worker w (0 <= w < Config.Clients). It is called concurrently
// by the workers and must return once ctx is done.
type Op func(ctx context.Context, w, i int) error

// Result is what a run measured.
type Result struct {
	// Requests counts the requests made, those that failed included: less
	// than Config.Total when the run stopped early.
	Requests int
	// Errors counts the requests whose Op returned an error; FirstError is
	// the first of them (nil when none failed).
	Errors     int
	FirstError error
	// Stopped is set when the run ended before Config.Total requests: ctx
	// was done or Config.ErrorsMax was reached.
	Stopped bool
	// Elapsed is the wall time from the first request's start to the last
	// one's end.
	Elapsed time.Duration
	// Latency holds the latency of every request that succeeded, in
	// microseconds.
	Latency *hdrhistogram.Histogram
}

// Run makes cfg.Total requests with cfg.Clients workers and returns once
// every worker has returned. Only a bad cfg is an error: failed requests
// are counted in the Result.
func Run(ctx context.Context, cfg Config, op Op) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	if op == nil {
		return Result{}, errors.New("loadgen: no op")
	}
	var (
		next, made, failed atomic.Int64
		stop               atomic.Bool
		mu                 sync.Mutex
		first              error
		wg                 sync.WaitGroup
	)
	hists := make([]*hdrhistogram.Histogram, cfg.Clients)
	start := time.Now()
	for w := range cfg.Clients {
		hists[w] = newHistogram()
		wg.Go(func() {
			h := hists[w]
			for !stop.Load() && ctx.Err() == nil {
				i := next.Add(1) - 1
				if i >= int64(cfg.Total) {
					return
				}
				made.Add(1)
				t0 := time.Now()
				err := op(ctx, w, int(i))
				took := time.Since(t0)
				if err == nil {
					_ = h.RecordValue(clampUs(took)) // clamped: always in range
					continue
				}
				n := failed.Add(1)
				mu.Lock()
				if first == nil {
					first = err
				}
				mu.Unlock()
				if cfg.ErrorsMax > 0 && n >= int64(cfg.ErrorsMax) {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
	res := Result{
		Requests:   int(made.Load()),
		Errors:     int(failed.Load()),
		FirstError: first,
		Elapsed:    time.Since(start),
		Latency:    newHistogram(),
	}
	res.Stopped = res.Requests < cfg.Total
	for _, h := range hists {
		res.Latency.Merge(h) // same bounds: nothing is dropped
	}
	return res, nil
}

func newHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(latencyUsMin, latencyUsMax, latencySigFigs)
}

func clampUs(d time.Duration) int64 {
	return min(max(d.Microseconds(), latencyUsMin), latencyUsMax)
}

// Recorder collects latencies from many goroutines into one histogram of
// Run's bounds: figures a request reports besides its own latency (the
// answers of a transaction's destinations, one Recorder each).
type Recorder struct {
	mu sync.Mutex
	h  *hdrhistogram.Histogram
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{h: newHistogram()} }

// Record adds d, clamped to Run's bounds.
func (r *Recorder) Record(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	_ = r.h.RecordValue(clampUs(d)) // clamped: always within bounds
}

// Count returns the number of latencies recorded.
func (r *Recorder) Count() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.h.TotalCount()
}

// Summary returns the recorded latencies' figures (RequestsPerS 0).
func (r *Recorder) Summary() Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	return summarize(r.h, 0)
}

// Summary is a Result in the units people read: requests per second and
// latencies in milliseconds, rounded to the microsecond.
type Summary struct {
	RequestsPerS float64
	MeanMs       float64
	P50Ms        float64
	P90Ms        float64
	P99Ms        float64
	P999Ms       float64
	MaxMs        float64
}

// Summary computes r's figures. Requests per second counts the requests
// that succeeded over Elapsed, as etcd's tool does; with none, every
// figure is 0.
func (r Result) Summary() Summary {
	if r.Elapsed <= 0 {
		return Summary{}
	}
	return summarize(r.Latency, r.Elapsed)
}

// summarize computes h's figures over elapsed (0: no RequestsPerS).
func summarize(h *hdrhistogram.Histogram, elapsed time.Duration) Summary {
	if h == nil || h.TotalCount() == 0 {
		return Summary{}
	}
	rps := 0.0
	if elapsed > 0 {
		rps = math.Round(float64(h.TotalCount())/elapsed.Seconds()*roundRPSDecimal) / roundRPSDecimal
	}
	ms := func(us float64) float64 { return math.Round(us/usPerMs*roundMsDecimals) / roundMsDecimals }
	q := func(p float64) float64 { return ms(float64(h.ValueAtQuantile(p))) }
	return Summary{
		RequestsPerS: rps,
		MeanMs:       ms(h.Mean()),
		P50Ms:        q(quantileP50),
		P90Ms:        q(quantileP90),
		P99Ms:        q(quantileP99),
		P999Ms:       q(quantileP999),
		MaxMs:        ms(float64(h.Max())),
	}
}

// KeySizeMax bounds Keys.Size: far beyond a store's usual key limit,
// small enough that a key's suffix never costs much.
const KeySizeMax = 1 << 16

// Keys names the keys of a run: request i uses Prefix followed by Size
// bytes, i as a zero-padded decimal number. When i has more digits than
// Size, only its last Size digits are kept: the keys repeat every 10^Size
// requests, so that a small Size makes a small, hot key space (etcd's
// --key-space-size by another name). Decimal digits keep keys printable,
// so that tools show them plainly, and in the order of i.
//
// Descending keys count down from the top of the key space instead: request
// i uses 10^Size-1-i (9...9, then 9...8), so that two loads over one prefix,
// one each way, meet only when together they make 10^Size requests: a load
// of integer adds stays off the keys where a load of puts stored text.
type Keys struct {
	Prefix     []byte
	Size       int // 1..KeySizeMax
	Descending bool
}

// Validate reports whether k's Size is usable.
func (k Keys) Validate() error {
	if k.Size < 1 || k.Size > KeySizeMax {
		return fmt.Errorf("loadgen: key size %d, want 1..%d", k.Size, KeySizeMax)
	}
	return nil
}

// Key returns the key of request i >= 0, in a new slice.
func (k Keys) Key(i int) []byte {
	return k.AppendKey(make([]byte, 0, len(k.Prefix)+k.Size), i)
}

// AppendKey appends the key of request i >= 0 to b.
func (k Keys) AppendKey(b []byte, i int) []byte {
	var digits [20]byte // an int has at most 19 decimal digits
	d := strconv.AppendUint(digits[:0], uint64(i), 10)
	if len(d) > k.Size {
		d = d[len(d)-k.Size:]
	}
	b = append(b, k.Prefix...)
	pad := byte('0')
	if k.Descending {
		pad = '9'
	}
	for range k.Size - len(d) {
		b = append(b, pad)
	}
	for _, c := range d {
		if k.Descending {
			c = '9' - (c - '0') // the nines' complement: 10^Size-1-i
		}
		b = append(b, c)
	}
	return b
}

// First and Last return the lowest and the highest key k can make: every
// key of k sorts between them, since all have the same length and
// decimal digits sort in their numeric order.
func (k Keys) First() []byte { return k.fill('0') }

// Last returns the highest key k can make (see First).
func (k Keys) Last() []byte { return k.fill('9') }

func (k Keys) fill(c byte) []byte {
	b := append(make([]byte, 0, len(k.Prefix)+k.Size), k.Prefix...)
	for range k.Size {
		b = append(b, c)
	}
	return b
}
