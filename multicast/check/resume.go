package check

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// A replica killed (SIGKILL, a crash) runs again, when it restarts, the
// entries it applied since its store last flushed (DESIGN 6.4): it delivers
// again, in the same order, messages its delivery log already holds. A log
// that AppendFile reopens after its writer did not close (the marker file
// beside it, PATH.open, is still there) leaves those deliveries out: for
// each replica, it keeps the file's last deliveries, and when the replica's
// first delivery after the reopening is one of them, it skips the
// deliveries that repeat the file's, one for one, up to its last one. A
// replica that delivers otherwise than it logged is not hidden: at the
// first delivery that departs from the file's sequence, the skipped
// deliveries are written again, then that one, and a check of the log sees
// the duplicates and the order. After a clean close nothing is skipped: a
// replica that delivers a message again after a graceful restart is a bug
// the log shows.

// resumeTailMax bounds the deliveries of each replica that AppendFile keeps
// from the file it reopens: a replay longer than that (it runs again at
// most the entries of two memtables) is logged twice.
const resumeTailMax = 1 << 16

// openMarkerSuffix names the file beside a log that AppendFile creates and
// Close removes: found at the next AppendFile, the writer before did not
// close.
const openMarkerSuffix = ".open"

// loggedReplica names one replica of one group in a log.
type loggedReplica struct{ group, replica string }

// loggedDelivery is a delivery of a reopened log: its id and destinations.
type loggedDelivery struct {
	id  string
	dst []string
}

// resume is what a reopened log knows of one replica's deliveries.
type resume struct {
	tail  []loggedDelivery // the file's last deliveries of the replica, in order
	start int              // where the replay's first delivery matched the tail; -1 before
	next  int              // the tail's delivery the replay must repeat next
}

// readResume returns the last deliveries of each replica in the log file
// name. A line that does not parse ends the reading: what came before it is
// kept.
func readResume(name string) (map[loggedReplica]*resume, error) {
	out := map[loggedReplica]*resume{}
	err := scanFile(name, func(r Record) error {
		if r.Ev != EvDeliver {
			return nil
		}
		k := loggedReplica{r.Group, r.Replica}
		st := out[k]
		if st == nil {
			st = &resume{start: -1}
			out[k] = st
		}
		if len(st.tail) == 2*resumeTailMax {
			st.tail = slices.Delete(st.tail, 0, resumeTailMax)
		}
		st.tail = append(st.tail, loggedDelivery{r.ID, r.Dst})
		return nil
	})
	if err != nil && !errors.Is(err, ErrMalformed) {
		return nil, err
	}
	for _, st := range out {
		if n := len(st.tail); n > resumeTailMax {
			st.tail = slices.Clip(st.tail[n-resumeTailMax:])
		}
	}
	return out, nil
}

// resumed decides delivery r of a reopened log: skip reports that it
// repeats the file's and is left out; again lists the deliveries to write
// before it (those skipped, when r departs from the file's sequence); over
// reports that the replay is over (matched to the tail's end, or departed
// from it), and st has nothing more to decide.
func (st *resume) resumed(r *Record) (skip bool, again []loggedDelivery, over bool) {
	if st.start < 0 {
		i := len(st.tail) - 1
		for i >= 0 && st.tail[i].id != r.ID {
			i--
		}
		if i < 0 {
			return false, nil, true
		}
		st.start, st.next = i, i
	}
	if st.next < len(st.tail) && st.tail[st.next].id == r.ID && slices.Equal(st.tail[st.next].dst, r.Dst) {
		st.next++
		return true, nil, st.next == len(st.tail)
	}
	return false, st.tail[st.start:st.next], true
}

// AppendFile opens (or creates) the file at path for appending and returns a
// Writer on it; Close flushes and closes the file. A replica restarted in
// the same run appends to its log; after a kill, without the deliveries
// its restart repeats (see resume). A last line that a crash left half
// written is cut off first, so that the next line starts a line.
func AppendFile(path string) (*Writer, error) {
	info, err := os.Stat(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("check: %w", err)
	}
	regular := err == nil && info.Mode().IsRegular()
	var resumes map[loggedReplica]*resume
	if regular {
		if err := cutPartialLine(path, info.Size()); err != nil {
			return nil, err
		}
		if _, err := os.Stat(path + openMarkerSuffix); err == nil {
			if resumes, err = readResume(path); err != nil {
				return nil, fmt.Errorf("check: reopen: %w", err)
			}
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	w := NewWriter(f)
	w.closer = f
	if isRegular(f) {
		if err := os.WriteFile(path+openMarkerSuffix, nil, 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("check: %w", err), f.Close())
		}
		w.marker = path + openMarkerSuffix
	}
	if len(resumes) > 0 {
		w.resumes = resumes
	}
	return w, nil
}

func isRegular(f *os.File) bool {
	info, err := f.Stat()
	return err == nil && info.Mode().IsRegular()
}

// cutPartialLine truncates the file at path, of size bytes, after its last
// newline when it does not end with one.
func cutPartialLine(path string, size int64) error {
	if size == 0 {
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer f.Close()
	const window = 64 << 10
	for end := size; end > 0; end -= window {
		start := max(0, end-window)
		buf := make([]byte, end-start)
		if _, err := f.ReadAt(buf, start); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("check: %w", err)
		}
		if end == size && buf[len(buf)-1] == '\n' {
			return nil
		}
		if i := bytes.LastIndexByte(buf, '\n'); i >= 0 {
			return truncate(f, start+int64(i)+1)
		}
	}
	return truncate(f, 0)
}

func truncate(f *os.File, size int64) error {
	if err := f.Truncate(size); err != nil {
		return fmt.Errorf("check: cut a partial last line: %w", err)
	}
	return nil
}

// Skipped returns how many deliveries the writer left out as repeats of its
// reopened file's.
func (w *Writer) Skipped() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.skipped
}
