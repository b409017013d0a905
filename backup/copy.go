package backup

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/flexkv/flexkv/api/apipb"
	"github.com/flexkv/flexkv/partition"
)

// candidate is a replica to copy a group's checkpoint from.
type candidate struct {
	id, addr, role string
}

// candidates orders g's replicas for the copy: followers first (a copy
// reads their disks, not the leader's, which serves the load), then the
// leader, then those that did not answer Status.
func (c *creator) candidates(ctx context.Context, g *partition.GroupConfig) []candidate {
	var followers, leaders, others []candidate
	for _, r := range g.Replicas {
		cd := candidate{id: r.ID, addr: r.GRPC, role: "down"}
		err := c.call(ctx, r.GRPC, func(ctx context.Context, kc apipb.KVClient) error {
			st, err := kc.Status(ctx, &apipb.StatusRequest{})
			cd.role = st.GetRole()
			return err
		})
		switch {
		case err != nil:
			others = append(others, cd)
		case cd.role == "follower":
			followers = append(followers, cd)
		case cd.role == "leader":
			leaders = append(leaders, cd)
		default:
			others = append(others, cd)
		}
	}
	return append(append(followers, leaders...), others...)
}

// copyGroup copies one replica's checkpoint of marker at group g, whose
// applied index at the marker is index, into Dir/g. A replica that lacks
// the checkpoint (it caught up past the marker by a snapshot) or fails
// midway is skipped for the next.
func (c *creator) copyGroup(ctx context.Context, g *partition.GroupConfig, marker string, index uint64) (*Group, error) {
	dir := filepath.Join(c.o.Dir, g.Name)
	var errs []error
	for _, cd := range c.candidates(ctx, g) {
		start := time.Now()
		copied, err := c.copyFrom(ctx, cd, dir, marker, index)
		if err == nil {
			copied.Name = g.Name
			c.progress("group %s: %d files, %d bytes from %s (%s), applied index %d, in %s",
				g.Name, len(copied.Files), copied.Bytes, cd.id, cd.role, index, time.Since(start).Round(time.Millisecond))
			return copied, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", cd.id, err))
		c.progress("group %s: no copy from %s (%s): %v", g.Name, cd.id, cd.role, err)
		if rerr := os.RemoveAll(dir); rerr != nil {
			return nil, fmt.Errorf("backup: %w", rerr)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("backup: no replica of group %s gave its checkpoint %s: %w", g.Name, marker, errors.Join(errs...))
}

// progressEvery is how many bytes a copy moves between progress lines.
const progressEvery = 64 << 20

// copyFrom copies cd's checkpoint into dir.
func (c *creator) copyFrom(ctx context.Context, cd candidate, dir, marker string, index uint64) (*Group, error) {
	kc, err := c.client(cd.addr)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := kc.BackupFiles(ctx, &apipb.BackupFilesRequest{Marker: marker})
	if err != nil {
		return nil, err
	}
	first, err := stream.Recv()
	if err != nil {
		return nil, err
	}
	if first.GetAppliedIndex() != index {
		return nil, fmt.Errorf("its checkpoint holds applied index %d, the marker ran at %d", first.GetAppliedIndex(), index)
	}
	g := &Group{Replica: cd.id, AppliedIndex: index}
	for _, f := range first.GetFiles() {
		if !localPath(f.GetPath()) || f.GetSize() < 0 {
			return nil, fmt.Errorf("bad file %q of %d bytes in the list", f.GetPath(), f.GetSize())
		}
		g.Files = append(g.Files, File{Path: f.GetPath(), Size: f.GetSize()})
		g.Bytes += f.GetSize()
	}
	next, done := 0, int64(0)
	start := time.Now()
	var w *sumWriter
	for {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if w == nil || chunk.GetPath() != w.file.Path {
			if w, err = c.nextFile(g, w, &next, dir, chunk.GetPath()); err != nil {
				return nil, err
			}
		}
		if chunk.GetOffset() != w.n {
			return nil, fmt.Errorf("file %s: a chunk at offset %d, %d bytes received", w.file.Path, chunk.GetOffset(), w.n)
		}
		if err := w.write(chunk.GetData()); err != nil {
			return nil, err
		}
		if done/progressEvery != (done+int64(len(chunk.GetData())))/progressEvery {
			c.progress("group %s: %d of %d bytes", filepath.Base(dir), done+int64(len(chunk.GetData())), g.Bytes)
		}
		done += int64(len(chunk.GetData()))
		if err := c.pace(ctx, start, done); err != nil {
			return nil, err
		}
	}
	if _, err := c.nextFile(g, w, &next, dir, ""); err != nil {
		return nil, err
	}
	return g, nil
}

// nextFile finishes w, the file being written (its checksum into g), and
// opens the next of g's files, which must be path ("" after the last).
func (c *creator) nextFile(g *Group, w *sumWriter, next *int, dir, path string) (*sumWriter, error) {
	if w != nil {
		f, err := w.finish()
		if err != nil {
			return nil, err
		}
		g.Files[*next-1] = f
	}
	if *next == len(g.Files) {
		if path != "" {
			return nil, fmt.Errorf("file %s after the last listed", path)
		}
		return nil, nil
	}
	want := g.Files[*next]
	if path != want.Path {
		if path == "" {
			return nil, fmt.Errorf("the stream ended before file %s", want.Path)
		}
		return nil, fmt.Errorf("file %s sent, %s expected next", path, want.Path)
	}
	*next++
	return newSumWriter(filepath.Join(dir, filepath.FromSlash(path)), want)
}

// pace waits until done bytes copied since start keep within
// Options.BytesPerSecond.
func (c *creator) pace(ctx context.Context, start time.Time, done int64) error {
	if c.o.BytesPerSecond <= 0 {
		return nil
	}
	due := time.Duration(float64(done) / c.o.BytesPerSecond * float64(time.Second))
	wait := due - time.Since(start)
	if wait <= 0 {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
