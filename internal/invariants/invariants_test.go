package invariants

import (
	"errors"
	"strings"
	"testing"
)

func TestViolatedNamesTheInvariant(t *testing.T) {
	v := Catch(func() { Violated("pkg: outbox of %d bytes, counted %d", 3, 4) })
	if v == nil {
		t.Fatal("Violated returned")
	}
	if got, want := v.Error(), "invariant violated: pkg: outbox of 3 bytes, counted 4"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func TestHold(t *testing.T) {
	if v := Catch(func() { Hold(nil) }); v != nil {
		t.Errorf("Hold(nil) panicked with %v", v)
	}
	v := Catch(func() { Hold(errors.New("pkg: seqs out of order")) })
	if v == nil || v.Detail != "pkg: seqs out of order" {
		t.Errorf("Hold(err) panicked with %v, want the detail of err", v)
	}
}

func TestCatchPassesOtherPanics(t *testing.T) {
	defer func() {
		r := recover()
		if s, ok := r.(string); !ok || !strings.Contains(s, "not an invariant") {
			t.Errorf("recovered %v, want the original panic", r)
		}
	}()
	_ = Catch(func() { panic("not an invariant") })
	t.Error("Catch swallowed a panic that is no Violation")
}
