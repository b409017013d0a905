package check

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
)

// A replica killed (SIGKILL, a crash, power loss) runs again, when it
// restarts, the entries it applied since its store last flushed (DESIGN
// 6.4): it delivers again, in the same order, messages its delivery log
// already holds. A log reopened by AppendFile leaves those deliveries out:
// for each replica, it keeps the last deliveries of the file, and when the
// replica's first delivery after the reopening is one of them, it skips the
// deliveries that repeat the file's, one for one, up to its last one. A
// replica that delivers otherwise than it logged is not hidden: at the
// first delivery that departs from the file's sequence, the skipped
// deliveries are written again, then that one, and a check of the log sees
// the duplicates and the order.

// resumeTailMax bounds the deliveries of each replica that AppendFile keeps
// from the file it reopens: a replay longer than that (it runs again at
// most the entries of two memtables) is logged twice, as before.
const resumeTailMax = 1 << 16

// loggedReplica names one replica of one group in a log.
type loggedReplica struct{ group, replica string }

// resume is what a reopened log knows of one replica's deliveries.
type resume struct {
	tail  []Record // the file's last deliveries of the replica, in order
	start int      // where the replay's first delivery matched the tail; -1 before
	next  int      // the tail's delivery the replay must repeat next
	done  bool     // matched to the tail's end, or departed from it
}

// readResume returns the last deliveries of each replica in the file at
// path (none when there is no file). A line that does not parse ends the
// reading: what came before it is kept.
func readResume(path string) (map[loggedReplica]*resume, error) {
	out := map[loggedReplica]*resume{}
	err := scanFile(path, func(r Record) error {
		if r.Ev != EvDeliver {
			return nil
		}
		k := loggedReplica{r.Group, r.Replica}
		st := out[k]
		if st == nil {
			st = &resume{start: -1}
			out[k] = st
		}
		if len(st.tail) == resumeTailMax {
			st.tail = slices.Delete(st.tail, 0, resumeTailMax/4)
		}
		st.tail = append(st.tail, r)
		return nil
	})
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, nil
	case errors.Is(err, ErrMalformed):
		return out, nil
	case err != nil:
		return nil, err
	}
	return out, nil
}

// resumed decides delivery r of a reopened log: skip reports that it
// repeats the file's and is left out; again lists the deliveries to write
// before it (those skipped, when r departs from the file's sequence).
func (st *resume) resumed(r *Record) (skip bool, again []Record) {
	if st.start < 0 {
		i := slices.IndexFunc(st.tail, func(t Record) bool { return t.ID == r.ID })
		if i < 0 {
			st.done = true
			return false, nil
		}
		st.start, st.next = i, i
	}
	if st.next < len(st.tail) && st.tail[st.next].ID == r.ID && slices.Equal(st.tail[st.next].Dst, r.Dst) {
		st.next++
		st.done = st.next == len(st.tail)
		return true, nil
	}
	st.done = true
	return false, st.tail[st.start:st.next]
}

// AppendFile opens (or creates) the file at path for appending and returns a
// Writer on it; Close flushes and closes the file. A replica restarted in
// the same run appends to its log, without the deliveries its restart
// repeats (see resume).
func AppendFile(path string) (*Writer, error) {
	resumes, err := readResume(path)
	if err != nil {
		return nil, fmt.Errorf("check: reopen %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	w := NewWriter(f)
	w.closer = f
	if len(resumes) > 0 {
		w.resumes = resumes
	}
	return w, nil
}
