package replication

import (
	"bytes"
	"log/slog"
	"strings"
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
