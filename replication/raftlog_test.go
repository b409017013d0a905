package replication

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRaftLogWriter: raft's lines become records at their level, and a
// kind of record that repeats (a leader retrying a peer that is down) is
// written once every raftLogRepeatEvery, with the count left out since.
func TestRaftLogWriter(t *testing.T) {
	var buf bytes.Buffer
	w := &raftLogWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	for range 50 {
		if _, err := w.Write([]byte("[ERROR] raft: failed to heartbeat to: peer=10.0.0.2:7100 error=\"refused\"\n")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Write([]byte("[WARN]  raft: heartbeat timeout reached, starting election: last-leader-addr=\n")); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if n := strings.Count(out, "failed to heartbeat to"); n != 1 {
		t.Errorf("50 heartbeat failures in a row written %d times, want once:\n%s", n, out)
	}
	if !strings.Contains(out, "level=ERROR msg=\"raft: failed to heartbeat to") || !strings.Contains(out, "level=WARN msg=\"raft: heartbeat timeout reached") {
		t.Errorf("levels or texts lost:\n%s", out)
	}

	// Past the period the kind is written again, with the count.
	now := time.Now()
	if ok, _ := w.admit("raft: failed to heartbeat to: peer=x", now); ok {
		t.Error("a repeat within the period admitted")
	}
	ok, skipped := w.admit("raft: failed to heartbeat to: peer=x", now.Add(raftLogRepeatEvery+time.Second))
	if !ok || skipped != 50 {
		t.Errorf("after the period: admitted %v with %d left out, want true and 50 (49 written in a row, one more here)", ok, skipped)
	}
}

// TestRaftLogWriterQuiet: once the replica is quiet (it stops, or its whole
// cluster does), raft's errors are debug records, not errors.
func TestRaftLogWriterQuiet(t *testing.T) {
	var buf bytes.Buffer
	var quiet atomic.Bool
	w := &raftLogWriter{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), quiet: &quiet}
	line := []byte("[ERROR] raft: failed to appendEntries to: peer=r1 error=EOF\n")
	if _, err := w.Write(line); err != nil {
		t.Fatal(err)
	}
	quiet.Store(true)
	if _, err := w.Write([]byte("[ERROR] raft: failed to decode incoming command: error=\"transport shutdown\"\n")); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	if !strings.Contains(out, "level=ERROR msg=\"raft: failed to appendEntries") {
		t.Errorf("before quiet, an error is not an error:\n%s", out)
	}
	if !strings.Contains(out, "level=DEBUG msg=\"raft: failed to decode incoming command") || strings.Count(out, "level=ERROR") != 1 {
		t.Errorf("once quiet, an error is still an error:\n%s", out)
	}
}
