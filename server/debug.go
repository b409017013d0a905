package server

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/common/expfmt"

	"github.com/flexkv/flexkv/api/apipb"
)

// What `flexkv debug bundle` gathers from each replica (DESIGN 11), as
// CockroachDB's `debug zip` does from each node: its status, its metrics,
// its recent logs and its settings, secrets and keys left out.

// Bounds of the logs a replica keeps for Debug: the most recent lines, up
// to logLinesMax of them and logBytesMax bytes; a longer line is cut.
const (
	logLinesMax   = 4096
	logBytesMax   = 1 << 20
	logLineMaxLen = 8 << 10
)

// logRing keeps the most recent log lines within its bounds.
type logRing struct {
	mu      sync.Mutex
	lines   [][]byte // oldest first
	bytes   int
	dropped uint64
}

// Write implements io.Writer for a slog.TextHandler: each call is one
// record's line.
func (r *logRing) Write(p []byte) (int, error) {
	line := bytes.Clone(p)
	if len(line) > logLineMaxLen {
		line = append(line[:logLineMaxLen-len("...\n")], "...\n"...)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, line)
	r.bytes += len(line)
	for len(r.lines) > logLinesMax || r.bytes > logBytesMax {
		r.bytes -= len(r.lines[0])
		r.lines[0] = nil
		r.lines = r.lines[1:]
		r.dropped++
	}
	return len(p), nil
}

// text returns the lines kept, oldest first, and how many were dropped.
func (r *logRing) text() (string, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return string(bytes.Join(r.lines, nil)), r.dropped
}

// ringLevel is the least level the ring keeps, whatever the logger's.
const ringLevel = slog.LevelInfo

// teeHandler hands each record to the server's own handler, when that one
// takes it, and keeps it in the ring from ringLevel up.
type teeHandler struct {
	inner slog.Handler
	ring  slog.Handler // a TextHandler writing to the logRing
}

func (h teeHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= ringLevel || h.inner.Enabled(ctx, l)
}

func (h teeHandler) Handle(ctx context.Context, rec slog.Record) error {
	var err error
	if h.inner.Enabled(ctx, rec.Level) {
		err = h.inner.Handle(ctx, rec.Clone())
	}
	if rec.Level >= ringLevel {
		_ = h.ring.Handle(ctx, rec) // the ring's writer never fails
	}
	return err
}

func (h teeHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return teeHandler{inner: h.inner.WithAttrs(attrs), ring: h.ring.WithAttrs(attrs)}
}

func (h teeHandler) WithGroup(name string) slog.Handler {
	return teeHandler{inner: h.inner.WithGroup(name), ring: h.ring.WithGroup(name)}
}

// withRing returns logger, its records also kept in ring.
func withRing(logger *slog.Logger, ring *logRing) *slog.Logger {
	return slog.New(teeHandler{inner: logger.Handler(), ring: slog.NewTextHandler(ring, &slog.HandlerOptions{Level: ringLevel})})
}

// Debug answers `flexkv debug bundle` (DESIGN 11).
func (v *service) Debug(context.Context, *apipb.DebugRequest) (*apipb.DebugResponse, error) {
	return v.s.Debug()
}

// Debug returns the replica's part of a debug bundle.
func (s *Server) Debug() (*apipb.DebugResponse, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(s.Metrics()); err != nil {
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector())
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	var metrics bytes.Buffer
	enc := expfmt.NewEncoder(&metrics, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	settings, err := json.MarshalIndent(s.settings(), "", "  ")
	if err != nil {
		return nil, err
	}
	logs, dropped := s.logs.text()
	return &apipb.DebugResponse{Status: s.Status(), Metrics: metrics.String(), Logs: logs, LogsDropped: dropped, Settings: string(settings)}, nil
}

// debugSettings are a replica's settings as a debug bundle shows them:
// paths, names, bounds and public certificate facts, never a key.
type debugSettings struct {
	Node                string        `json:"node"`
	Group               string        `json:"group"`
	Dir                 string        `json:"data_dir"`
	ListenHost          string        `json:"listen_host,omitempty"`
	MetricsAddr         string        `json:"metrics_addr,omitempty"`
	InitialClusterState ClusterState  `json:"initial_cluster_state"`
	LatencyMode         LatencyMode   `json:"latency_mode"`
	LatencyJitter       float64       `json:"latency_jitter"`
	WaitMax             time.Duration `json:"wait_max_ns"`
	ScanBytesMax        int           `json:"scan_bytes_max"`
	TLS                 bool          `json:"tls"`
	Certificates        []debugCert   `json:"certificates,omitempty"`
	ClusterID           string        `json:"cluster_id"`
	Fingerprint         string        `json:"fingerprint"`
	Configuration       string        `json:"configuration"` // canonical text (DESIGN 13)
}

type debugCert struct {
	File     string    `json:"file"`
	NotAfter time.Time `json:"not_after"`
}

func (s *Server) settings() debugSettings {
	d := debugSettings{
		Node: s.cfg.NodeID, Group: s.group.Name, Dir: s.cfg.Dir, ListenHost: s.cfg.ListenHost, MetricsAddr: s.cfg.MetricsAddr,
		InitialClusterState: s.cfg.InitialClusterState, LatencyMode: s.cfg.LatencyMode, LatencyJitter: s.cfg.LatencyJitter,
		WaitMax: s.cfg.WaitMax, ScanBytesMax: s.cfg.ScanBytesMax, TLS: s.cfg.Node != nil,
		ClusterID: s.identity.ClusterID, Fingerprint: s.identity.Fingerprint, Configuration: s.cfg.Cluster.Canonical(),
	}
	if n := s.cfg.Node; n != nil {
		for _, x := range n.Expiries() {
			d.Certificates = append(d.Certificates, debugCert{File: x.File, NotAfter: x.NotAfter})
		}
	}
	return d
}
