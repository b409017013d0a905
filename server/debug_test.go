package server

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
)

// The ring keeps the most recent lines within its bounds, counts those it
// dropped, and keeps info and up whatever the server's own logger takes.
func TestLogRing(t *testing.T) {
	var inner strings.Builder
	ring := &logRing{}
	log := withRing(slog.New(slog.NewTextHandler(&inner, &slog.HandlerOptions{Level: slog.LevelError})), ring)
	log.Debug("not kept")
	log.Warn("kept", "n", 0)
	log.Error("both")
	if got, _ := ring.text(); strings.Contains(got, "not kept") || !strings.Contains(got, "msg=kept n=0") || !strings.Contains(got, "msg=both") {
		t.Fatalf("ring holds %q, want the warning and the error, not the debug line", got)
	}
	if got := inner.String(); strings.Contains(got, "kept") || !strings.Contains(got, "msg=both") {
		t.Fatalf("the server's logger got %q, want the error alone", got)
	}
	long := strings.Repeat("x", 2*logLineMaxLen)
	for i := range logLinesMax + 10 {
		log.With("i", i).Info(fmt.Sprint("line ", i), "long", long[:i%3*logLineMaxLen/2])
	}
	got, dropped := ring.text()
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if len(got) > logBytesMax || len(lines) > logLinesMax || dropped < 12 {
		t.Fatalf("ring: %d bytes, %d lines, %d dropped; want at most %d bytes, %d lines, and the rest counted", len(got), len(lines), dropped, logBytesMax, logLinesMax)
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, fmt.Sprintf("line %d", logLinesMax+9)) || len(last) > logLineMaxLen {
		t.Fatalf("ring's last line %.80q... (%d bytes), want the last one logged, cut to %d", last, len(last), logLineMaxLen)
	}
	if uint64(len(lines))+dropped != logLinesMax+10+2 {
		t.Errorf("%d lines kept + %d dropped, want %d", len(lines), dropped, logLinesMax+12)
	}
}
