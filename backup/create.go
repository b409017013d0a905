package backup

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api"
	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/internal/rpcflow"
	"github.com/flexkv/flexkv/multicast/protocol"
	"github.com/flexkv/flexkv/partition"
)

// Options configure Create.
type Options struct {
	// Endpoints are client API addresses of the cluster, one of which
	// answers Topology: the rest of the cluster is found from it.
	Endpoints []string
	// TLS is the client's TLS configuration, its certificate the user
	// root's (server.BackupUser); nil: no TLS (a cluster run --insecure).
	TLS *tls.Config
	// Dir is the backup's directory: it must not exist, or be empty.
	Dir string
	// Progress receives a line per step (stderr); nil: none.
	Progress io.Writer
	// CallTimeout bounds each call to a replica but the file copies (0:
	// 30s).
	CallTimeout time.Duration
	// BytesPerSecond bounds the rate of the copy (0: no bound), so that a
	// backup of a loaded cluster takes longer rather than more of the
	// replicas' disks, network and CPU at once. The stream's flow control
	// slows the replica's reads to the same rate.
	BytesPerSecond float64
}

// creator is one Create: its options and connections.
type creator struct {
	o     Options
	creds credentials.TransportCredentials
	conns map[string]*grpc.ClientConn
}

func (c *creator) progress(format string, args ...any) {
	if c.o.Progress != nil {
		fmt.Fprintf(c.o.Progress, "backup: "+format+"\n", args...)
	}
}

func (c *creator) client(addr string) (apipb.KVClient, error) {
	if cc, ok := c.conns[addr]; ok {
		return apipb.NewKVClient(cc), nil
	}
	cc, err := grpc.NewClient(addr, append(rpcflow.DialOptions(), grpc.WithTransportCredentials(c.creds))...)
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return apipb.NewKVClient(cc), nil
}

func (c *creator) close() {
	for _, cc := range c.conns {
		_ = cc.Close()
	}
}

// call runs f against addr within the call timeout.
func (c *creator) call(ctx context.Context, addr string, f func(context.Context, apipb.KVClient) error) error {
	kc, err := c.client(addr)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.o.CallTimeout)
	defer cancel()
	return f(ctx, kc)
}

// CheckEmptyDir returns an error unless dir does not exist or is an empty
// directory.
func CheckEmptyDir(dir string) error {
	names, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("backup: %w", err)
	case len(names) > 0:
		return fmt.Errorf("backup: %s exists and is not empty (%d entries, first %s): give a new directory", dir, len(names), names[0].Name())
	}
	return nil
}

// Create takes a backup of the cluster into o.Dir (see the package
// comment) and returns its manifest.
func Create(ctx context.Context, o Options) (*Manifest, error) {
	if err := CheckEmptyDir(o.Dir); err != nil {
		return nil, err
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	c := &creator{o: o, creds: insecure.NewCredentials(), conns: map[string]*grpc.ClientConn{}}
	if o.TLS != nil {
		c.creds = credentials.NewTLS(o.TLS)
	}
	defer c.close()
	start := time.Now()
	tp, err := c.topology(ctx)
	if err != nil {
		return nil, err
	}
	cfg, _, err := api.ConfigFromProto(tp)
	if err != nil {
		return nil, fmt.Errorf("backup: topology: %w", err)
	}
	proto, top, _, err := protocol.Build(cfg)
	if err != nil {
		return nil, fmt.Errorf("backup: topology: %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	all := partition.AllGroups(top.Len())
	// The entry of a message to every group, by the epoch's ranks.
	etop, err := api.EpochTopology(tp, top)
	if err != nil {
		return nil, fmt.Errorf("backup: topology: %w", err)
	}
	entry := groupConfig(cfg, top.Name(proto.Entries(etop, all).Min()))
	resp, err := c.startMarker(ctx, entry)
	if err != nil {
		return nil, err
	}
	m := newManifest(cfg, tp, resp)
	c.progress("marker %s ran at group %s (%s protocol); copying one checkpoint per group", m.Marker, entry.Name, cfg.Protocol)
	for _, g := range all.Slice() {
		gc := groupConfig(cfg, top.Name(g))
		index, err := c.markerIndex(ctx, gc, resp)
		if err != nil {
			return nil, err
		}
		copied, err := c.copyGroup(ctx, gc, m.Marker, index)
		if err != nil {
			return nil, err
		}
		m.Groups = append(m.Groups, *copied)
	}
	if err := writeManifest(o.Dir, m); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	c.drop(ctx, cfg, m.Marker)
	c.progress("done: %d groups, %d files, %d bytes in %s", len(m.Groups), m.files(), m.Bytes(), time.Since(start).Round(time.Millisecond))
	return m, nil
}

func (m *Manifest) files() int {
	n := 0
	for _, g := range m.Groups {
		n += len(g.Files)
	}
	return n
}

// epochOf is the epoch of the configuration a Topology reply describes
// (DESIGN 14, Epochs): a server older than epochs names none, and runs its
// bootstrap configuration, BootstrapEpoch. This is the one place that
// reads it.
func epochOf(tp *apipb.TopologyResponse) uint64 {
	if e := tp.GetEpoch(); e != 0 {
		return e
	}
	return BootstrapEpoch
}

func newManifest(cfg *partition.ClusterConfig, tp *apipb.TopologyResponse, resp *apipb.BackupResponse) *Manifest {
	m := &Manifest{
		Format: FormatVersion, ClusterID: resp.GetClusterId(), Epoch: epochOf(tp),
		Config: cfg.Canonical(), Protocol: cfg.Protocol, Marker: resp.GetMarker(),
		Created: time.Now().UTC().Format(time.RFC3339),
	}
	m.Partitions = partitionsOf(cfg)
	return m
}

func partitionsOf(cfg *partition.ClusterConfig) []Partition {
	var out []Partition
	for _, p := range cfg.Partitions {
		out = append(out, Partition{Name: p.Name, Start: p.Start, End: p.End, Group: p.Group, Replicated: p.Replicated})
	}
	return out
}

func groupConfig(cfg *partition.ClusterConfig, name string) *partition.GroupConfig {
	for i := range cfg.Groups {
		if cfg.Groups[i].Name == name {
			return &cfg.Groups[i]
		}
	}
	panic("backup: group " + name + " of the topology is not in its configuration")
}

// topology asks the endpoints, in turn, for the cluster's configuration.
func (c *creator) topology(ctx context.Context) (*apipb.TopologyResponse, error) {
	var errs []error
	for _, addr := range c.o.Endpoints {
		var tp *apipb.TopologyResponse
		err := c.call(ctx, addr, func(ctx context.Context, kc apipb.KVClient) (err error) {
			tp, err = kc.Topology(ctx, &apipb.TopologyRequest{})
			return err
		})
		if err == nil {
			return tp, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", addr, err))
	}
	return nil, fmt.Errorf("backup: no endpoint answered Topology: %w", errors.Join(errs...))
}

// retryable reports whether a call's error may pass at another replica or
// later: not a refusal of the request itself.
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.PermissionDenied, codes.InvalidArgument, codes.Unauthenticated, codes.Unimplemented:
		return false
	default:
		return true
	}
}

// retryPause is the pause between two rounds over a group's replicas.
const retryPause = 200 * time.Millisecond

// eachReplica calls f on the replicas of g, the leader it was told of
// first, in rounds until one succeeds, f's error is not retryable, or ctx
// ends.
func (c *creator) eachReplica(ctx context.Context, g *partition.GroupConfig, what string, f func(ctx context.Context, kc apipb.KVClient, trailer *metadata.MD) error) error {
	var last error
	hint := ""
	for {
		addrs := make([]string, 0, len(g.Replicas)+1)
		if hint != "" {
			addrs = append(addrs, hint)
		}
		for _, r := range g.Replicas {
			addrs = append(addrs, r.GRPC)
		}
		for _, addr := range addrs {
			var trailer metadata.MD
			err := c.call(ctx, addr, func(ctx context.Context, kc apipb.KVClient) error { return f(ctx, kc, &trailer) })
			if err == nil {
				return nil
			}
			if !retryable(err) {
				return fmt.Errorf("backup: %s at group %s (%s): %w", what, g.Name, addr, err)
			}
			last = fmt.Errorf("%s: %w", addr, err)
			if l := trailer.Get(apipb.LeaderTrailer); len(l) > 0 && l[0] != "" && l[0] != addr {
				hint = l[0]
				break
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("backup: %s at group %s: %w (last: %w)", what, g.Name, ctx.Err(), last)
		case <-time.After(retryPause):
		}
	}
}

// startMarker asks the entry group's leader to multicast a backup marker.
func (c *creator) startMarker(ctx context.Context, entry *partition.GroupConfig) (*apipb.BackupResponse, error) {
	var resp *apipb.BackupResponse
	attempts := 0
	err := c.eachReplica(ctx, entry, "start the backup marker", func(ctx context.Context, kc apipb.KVClient, trailer *metadata.MD) (err error) {
		attempts++
		resp, err = kc.Backup(ctx, &apipb.BackupRequest{}, grpc.Trailer(trailer))
		if err != nil && status.Code(err) != codes.Unavailable {
			// A marker that may have run: its checkpoints stay behind.
			c.progress("warning: starting the marker at group %s: %v; trying again", entry.Name, err)
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return resp, nil
}

// markerIndex returns group g's applied index at the marker: the entry
// group's from the Backup answer, the others' from Await.
func (c *creator) markerIndex(ctx context.Context, g *partition.GroupConfig, resp *apipb.BackupResponse) (uint64, error) {
	piece := resp.GetPiece()
	if piece.GetGroup() != g.Name {
		err := c.eachReplica(ctx, g, "await the backup marker", func(ctx context.Context, kc apipb.KVClient, trailer *metadata.MD) error {
			a, err := kc.Await(ctx, &apipb.AwaitRequest{ClientId: resp.GetClientId(), Seq: resp.GetSeq()}, grpc.Trailer(trailer))
			piece = a.GetPiece()
			return err
		})
		if err != nil {
			return 0, err
		}
	}
	r, err := api.PieceResultFromProto(piece)
	if err != nil {
		return 0, fmt.Errorf("backup: group %s: marker result: %w", g.Name, err)
	}
	index, ok := executor.MarkerIndex(r)
	if !ok {
		return 0, fmt.Errorf("backup: group %s: the marker's result is not a backup marker's (%+v): the replicas run another version", g.Name, r)
	}
	return index, nil
}

// drop drops the marker's checkpoint at every replica; a replica that does
// not answer keeps its checkpoint, which a warning names.
func (c *creator) drop(ctx context.Context, cfg *partition.ClusterConfig, marker string) (kept int) {
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			err := c.call(ctx, r.GRPC, func(ctx context.Context, kc apipb.KVClient) error {
				_, err := kc.DropBackup(ctx, &apipb.DropBackupRequest{Marker: marker})
				return err
			})
			if err != nil {
				c.progress("warning: replica %s/%s kept its checkpoint %s: %v (drop it with: flexkv backup drop %s)", g.Name, r.ID, marker, err, marker)
				kept++
			}
		}
	}
	return kept
}

// sumWriter writes a file and hashes what it writes.
type sumWriter struct {
	f    *os.File
	h    hash.Hash
	file File
	n    int64
}

func newSumWriter(path string, f File) (*sumWriter, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	return &sumWriter{f: out, h: sha256.New(), file: f}, nil
}

func (w *sumWriter) write(p []byte) error {
	if w.n+int64(len(p)) > w.file.Size {
		return fmt.Errorf("file %s: more than its %d bytes", w.file.Path, w.file.Size)
	}
	if _, err := w.f.Write(p); err != nil {
		return err
	}
	w.h.Write(p)
	w.n += int64(len(p))
	return nil
}

func (w *sumWriter) finish() (File, error) {
	err := w.f.Sync()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	if err == nil && w.n != w.file.Size {
		err = fmt.Errorf("file %s: %d bytes received, %d listed", w.file.Path, w.n, w.file.Size)
	}
	f := w.file
	f.SHA256 = hex.EncodeToString(w.h.Sum(nil))
	return f, err
}

// Drop drops checkpoint marker at every replica of the cluster, as Create
// does after its copy: for the checkpoints of a Create that stopped midway,
// or that a replica down at the time kept. It returns an error naming the
// replicas that did not drop it.
func Drop(ctx context.Context, o Options, marker string) error {
	if o.CallTimeout <= 0 {
		o.CallTimeout = 30 * time.Second
	}
	c := &creator{o: o, creds: insecure.NewCredentials(), conns: map[string]*grpc.ClientConn{}}
	if o.TLS != nil {
		c.creds = credentials.NewTLS(o.TLS)
	}
	defer c.close()
	tp, err := c.topology(ctx)
	if err != nil {
		return err
	}
	cfg, _, err := api.ConfigFromProto(tp)
	if err != nil {
		return fmt.Errorf("backup: topology: %w", err)
	}
	if kept := c.drop(ctx, cfg, marker); kept > 0 {
		return fmt.Errorf("backup: %d replicas kept checkpoint %s", kept, marker)
	}
	return nil
}
