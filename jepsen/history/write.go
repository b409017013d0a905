package history

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
)

// Writer writes a history. It stamps each line with its index and its
// time under one lock, so that the lines are in real-time order however
// many clients record at once. It is safe for concurrent use.
type Writer struct {
	mu   sync.Mutex
	w    *bufio.Writer
	now  func() int64 // nanoseconds since the run's start, monotonic
	next int64
	err  error // the first write error; every later Record returns it
}

// NewWriter returns a Writer to w; now gives the time of each line in
// nanoseconds (monotonic: a time.Since of the run's start).
func NewWriter(w io.Writer, now func() int64) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10), now: now}
}

// Record writes op with the next index and the current time, and returns
// it as written.
func (w *Writer) Record(op Op) (Op, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return op, w.err
	}
	op.Index, op.TimeNs = w.next, w.now()
	b, err := json.Marshal(op)
	if err == nil {
		_, err = w.w.Write(append(b, '\n'))
	}
	if err != nil {
		w.err = err
		return op, err
	}
	w.next++
	return op, nil
}

// Flush writes what is buffered.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	w.err = w.w.Flush()
	return w.err
}
