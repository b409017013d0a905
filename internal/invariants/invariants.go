// Package invariants holds FlexKV's self-checks (STYLE 3, after pebble's
// internal/invariants): Enabled turns on the expensive ones, which only
// `go test -tags invariants` builds; the cheap ones are always on. A broken
// internal invariant panics with a Violation that names it; bad external
// input is no invariant of the code and returns an error instead.
//
// It imports nothing of the module and is pure (no clock, randomness,
// goroutines or I/O), so that the deterministic cores may use it.
package invariants

import "fmt"

// Violation is the panic value of a broken invariant. Its message is
// "invariant violated: " and the detail, which names the package and the
// invariant: "invariant violated: channel: link to 2: outbox of 3 bytes,
// counted 4".
type Violation struct {
	Detail string
}

func (v *Violation) Error() string { return "invariant violated: " + v.Detail }

// Violated panics with a Violation of the formatted detail.
func Violated(format string, args ...any) {
	panic(&Violation{Detail: fmt.Sprintf(format, args...)})
}

// Hold panics with a Violation of err's message if err is not nil: for a
// check that returns the first invariant it finds broken as an error.
func Hold(err error) {
	if err != nil {
		panic(&Violation{Detail: err.Error()})
	}
}

// Catch runs f and returns the Violation it panicked with, nil if it
// returned. Any other panic goes on: a test that wants an invariant to fire
// must not pass on a nil dereference.
func Catch(f func()) (v *Violation) {
	defer func() {
		if r := recover(); r != nil {
			var ok bool
			if v, ok = r.(*Violation); !ok {
				panic(r)
			}
		}
	}()
	f()
	return nil
}
