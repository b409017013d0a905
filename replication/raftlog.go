package replication

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

// newRaftLogger returns the logger hashicorp/raft writes to: its warnings
// and errors (a leader that lost contact with its quorum and steps down, a
// peer it cannot reach, a snapshot that failed) become records of log at
// the same level, so that an operator reading a replica's log sees why its
// group changed leader. Raft's informational chatter (every election,
// every pipeline start) stays out. Once quiet is set (the replica stops,
// or its whole cluster does: Replica.Quiet), they are debug records: what
// raft says then is about peers going away as they were told to.
func newRaftLogger(log *slog.Logger, quiet *atomic.Bool) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{
		Name: "raft", Level: hclog.Warn, DisableTime: true,
		Output: &raftLogWriter{log: log, quiet: quiet},
	})
}

// raftLogRepeatEvery is how often a record of one kind is written while it
// repeats: a leader retries a peer that is down every few hundred
// milliseconds, and logs each failure ("failed to heartbeat to").
const raftLogRepeatEvery = 10 * time.Second

// raftLogWriter turns hclog's lines ("[WARN]  raft: text: key=value")
// into slog records, one of each kind (the text before its first colon,
// after raft's name) every raftLogRepeatEvery at most, with the number left
// out since.
type raftLogWriter struct {
	log   *slog.Logger
	quiet *atomic.Bool // nil: never quiet
	mu    sync.Mutex
	last  map[string]*raftLogKind
}

type raftLogKind struct {
	at      time.Time
	skipped int
}

// admit reports whether a record of text's kind is written now, and how
// many of its kind were left out before it.
func (w *raftLogWriter) admit(text string, now time.Time) (bool, int) {
	kind, _, _ := strings.Cut(strings.TrimPrefix(text, "raft: "), ":")
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last == nil {
		w.last = map[string]*raftLogKind{}
	}
	k, ok := w.last[kind]
	if ok && now.Sub(k.at) < raftLogRepeatEvery {
		k.skipped++
		return false, 0
	}
	if !ok {
		if len(w.last) >= 256 { // bounded: kinds are few, but texts are raft's
			clear(w.last)
		}
		k = &raftLogKind{}
		w.last[kind] = k
	}
	skipped := k.skipped
	k.at, k.skipped = now, 0
	return true, skipped
}

func (w *raftLogWriter) Write(p []byte) (int, error) {
	for line := range bytes.Lines(p) {
		text := strings.TrimSpace(string(line))
		if text == "" {
			continue
		}
		level := slog.LevelWarn
		switch {
		case strings.HasPrefix(text, "[ERROR]"):
			level = slog.LevelError
		case strings.HasPrefix(text, "[WARN]"):
		default:
			level = slog.LevelInfo
		}
		if w.quiet != nil && w.quiet.Load() {
			level = slog.LevelDebug
		}
		if i := strings.IndexByte(text, ']'); i >= 0 && strings.HasPrefix(text, "[") {
			text = strings.TrimSpace(text[i+1:])
		}
		ok, skipped := w.admit(text, time.Now())
		switch {
		case !ok:
		case skipped > 0:
			w.log.Log(context.Background(), level, text, "repeated", skipped)
		default:
			w.log.Log(context.Background(), level, text)
		}
	}
	return len(p), nil
}
