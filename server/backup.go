package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/executor"
	"github.com/flexkv/flexkv/kv"
	"github.com/flexkv/flexkv/partition"
	"github.com/flexkv/flexkv/txn"
)

// AdminUser is the one user who may change the cluster and take, copy and
// drop its backups (DESIGN 13, 14): a change of the epoch stops every
// entry group's work of the epoch, and a backup holds every key, so both
// are the administrator's, the user that `flexkv local` and `demo` create.
const AdminUser = "root"

// BackupUser is the one user who may take, copy and drop backups.
const BackupUser = AdminUser

// backupChunkBytes is the size of a BackupFiles data message: the one
// buffer a stream holds, well below a client's receive limit (4 MiB).
const backupChunkBytes = 1 << 20

// authorizeAdmin refuses a call from anyone but AdminUser, on a replica
// that runs TLS; without TLS (--insecure) there is no user. what says what
// the call would do, for the refusal.
func (s *Server) authorizeAdmin(ctx context.Context, method, what string) error {
	if !s.ready.Load() {
		return status.Errorf(codes.Unavailable, "server: replica %s is starting", s.cfg.NodeID)
	}
	if s.cfg.Node == nil {
		return nil
	}
	if user := userOf(ctx); user != AdminUser {
		s.log.Info("request refused", "method", method, "user", user, "code", codes.PermissionDenied.String())
		return status.Errorf(codes.PermissionDenied, "server: %s: user %q may not %s: only %q may", method, user, what, AdminUser)
	}
	return nil
}

// authorizeBackup refuses a backup call from anyone but BackupUser.
func (s *Server) authorizeBackup(ctx context.Context, method string) error {
	return s.authorizeAdmin(ctx, method, "back up the cluster")
}

// Backup implements apipb.KVServer: it proposes a backup marker to every
// group and answers when this group ran it.
func (v *service) Backup(ctx context.Context, _ *apipb.BackupRequest) (*apipb.BackupResponse, error) {
	s := v.s
	if err := s.authorizeBackup(ctx, "Backup"); err != nil {
		return nil, err
	}
	all := partition.AllGroups(s.top.Len())
	r := request{id: freshID(), dst: all, payload: txn.AppendBackupPayload(nil), home: partition.NoGroup}
	resp, err := s.run(ctx, r)
	if err != nil {
		return nil, err
	}
	out := &apipb.BackupResponse{
		ClientId: r.id.Client, Seq: r.id.Seq, Marker: executor.CheckpointName(r.id),
		Piece: resp.GetPiece(), ClusterId: s.identity.ClusterID,
	}
	for _, g := range all.Slice() {
		out.DestinationGroups = append(out.DestinationGroups, uint32(g))
	}
	s.log.Info("backup marker ran", "marker", out.Marker, "user", userOf(ctx))
	return out, nil
}

// checkpointStatus maps a checkpoint error of the store to a status.
func (s *Server) checkpointStatus(err error) error {
	switch {
	case errors.Is(err, kv.ErrInvalid):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, kv.ErrNoCheckpoint):
		msg := fmt.Sprintf("server: replica %s of group %s: %v", s.cfg.NodeID, s.group.Name, err)
		if cerr := s.exec.CheckpointError(); cerr != nil {
			msg += fmt.Sprintf(" (its last checkpoint failed: %v)", cerr)
		}
		return status.Error(codes.NotFound, msg)
	}
	return status.Error(codes.Internal, err.Error())
}

// BackupFiles implements apipb.KVServer: the file list of this replica's
// checkpoint of a marker, then its files in chunks.
func (v *service) BackupFiles(req *apipb.BackupFilesRequest, stream apipb.KV_BackupFilesServer) error {
	s := v.s
	if err := s.authorizeBackup(stream.Context(), "BackupFiles"); err != nil {
		return err
	}
	name := req.GetMarker()
	info, files, err := s.store.CheckpointFiles(name)
	if err != nil {
		return s.checkpointStatus(err)
	}
	first := &apipb.BackupFilesChunk{AppliedIndex: info.AppliedIndex, Group: s.group.Name, Replica: s.cfg.NodeID}
	for _, f := range files {
		first.Files = append(first.Files, &apipb.BackupFile{Path: f.Path, Size: f.Size})
	}
	if err := stream.Send(first); err != nil {
		return err
	}
	if req.GetListOnly() {
		return nil
	}
	for _, f := range files {
		if err := s.sendCheckpointFile(stream, name, f); err != nil {
			return err
		}
	}
	return nil
}

// sendCheckpointFile streams file f of checkpoint name, exactly its listed
// size: a file that changed since it was listed is an error.
func (s *Server) sendCheckpointFile(stream apipb.KV_BackupFilesServer, name string, f kv.CheckpointFile) error {
	r, err := s.store.OpenCheckpointFile(name, f.Path)
	if err != nil {
		return s.checkpointStatus(err)
	}
	defer r.Close()
	off := int64(0)
	for off < f.Size {
		// A buffer per message: a sent message is not to be changed.
		buf := make([]byte, min(backupChunkBytes, f.Size-off))
		n, err := io.ReadFull(r, buf)
		if err != nil {
			return status.Errorf(codes.Internal, "server: checkpoint %s: file %s: %v at offset %d of %d", name, f.Path, err, off+int64(n), f.Size)
		}
		if err := stream.Send(&apipb.BackupFilesChunk{Path: f.Path, Offset: off, Data: buf[:n]}); err != nil {
			return err
		}
		off += int64(n)
	}
	if f.Size == 0 {
		return stream.Send(&apipb.BackupFilesChunk{Path: f.Path})
	}
	return nil
}

// DropBackup implements apipb.KVServer.
func (v *service) DropBackup(ctx context.Context, req *apipb.DropBackupRequest) (*apipb.DropBackupResponse, error) {
	s := v.s
	if err := s.authorizeBackup(ctx, "DropBackup"); err != nil {
		return nil, err
	}
	if err := s.store.DropCheckpoint(req.GetMarker()); err != nil {
		return nil, s.checkpointStatus(err)
	}
	return &apipb.DropBackupResponse{}, nil
}

// SeedFromBackup seeds the data directory dir of replica node of cfg, a
// new cluster, from checkpoint, its group's copy in a backup (DESIGN 14,
// like etcdutl snapshot restore): the store holds the checkpoint's user
// data only (no results, sessions, queue or votes; applied index 0), the
// identity names clusterID, and there is no raft state, so that the
// replica bootstraps its group afresh (--initial-cluster-state new). dir
// must not exist or be empty.
func SeedFromBackup(dir string, cfg *partition.ClusterConfig, node, clusterID, checkpoint string) error {
	gc, _, ok := cfg.Replica(node)
	if !ok {
		return fmt.Errorf("server: node %q is not a replica of the configuration (replicas: %s)", node, strings.Join(cfg.ReplicaIDs(), ", "))
	}
	if names, err := os.ReadDir(dir); err == nil && len(names) > 0 {
		return fmt.Errorf("server: data directory %s is not empty: restore into a new one", dir)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	kvDir := filepath.Join(dir, "kv")
	if err := kv.SeedFromCheckpoint(checkpoint, kvDir); err != nil {
		return fmt.Errorf("server: %w", err)
	}
	st, err := kv.Open(kv.Options{Dir: kvDir})
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	err = st.KeepUserDataOnly()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("server: %w", err)
	}
	canonical := cfg.Canonical()
	id := Identity{ClusterID: clusterID, Fingerprint: partition.Fingerprint(canonical), Group: gc.Name, Replica: node, Config: canonical}
	return writeFileSync(filepath.Join(dir, identityFile), id)
}

// RestoredClusterID is the id of the cluster restored from backup of
// cluster old at marker: every replica of the new cluster derives the
// same, and it is not old's (DESIGN 14: a restore makes a new cluster).
func RestoredClusterID(old, marker string, cfg *partition.ClusterConfig) string {
	return clusterID(cfg.Canonical() + "\nrestored from " + old + " at " + marker)
}
