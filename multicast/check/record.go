package check

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/flexkv/flexkv/multicast"
)

// The values of a record's "ev" field.
const (
	EvMulticast = "multicast"
	EvDeliver   = "deliver"
	EvSend      = "send"
)

// FlushPrefix starts the ids of protocol-internal garbage-collection
// messages (multicast.MsgID.String of a flush). Sends about them are counted
// in the statistics and never checked; they are never multicast or delivered
// in the log.
const FlushPrefix = "flush."

// LineBytesMax bounds the length of one log line; a longer line is an error.
const LineBytesMax = 1 << 20

// ErrMalformed is wrapped by every error about a record that does not follow
// the log format: unknown event, missing or misplaced field, bad JSON.
var ErrMalformed = errors.New("check: malformed record")

// Record is one line of the delivery log (DESIGN 10.1). Ev says which other
// fields it has:
//
//	multicast: ID, Dst
//	deliver:   Group, Replica, ID, Dst
//	send:      From, To, Kind, About, Bytes
//
// Every listed string is non-empty, Dst is non-empty with distinct names, Kind
// is one of msg, ack, notif, ts, relay, vote, Bytes is not negative, and the
// fields of other events are zero. Bytes has no omitempty: a send line always
// carries it, and the zero value of a multicast or deliver line is accepted.
type Record struct {
	Ev      string   `json:"ev"`
	ID      string   `json:"id,omitempty"`
	Dst     []string `json:"dst,omitempty"`
	Group   string   `json:"group,omitempty"`
	Replica string   `json:"replica,omitempty"`
	From    string   `json:"from,omitempty"`
	To      string   `json:"to,omitempty"`
	Kind    string   `json:"kind,omitempty"`
	About   string   `json:"about,omitempty"`
	Bytes   int      `json:"bytes"`
}

// IsFlush reports whether id names a protocol-internal flush message.
func IsFlush(id string) bool { return strings.HasPrefix(id, FlushPrefix) }

// fieldSet is a set of a record's fields other than ev, one bit each.
type fieldSet uint16

const (
	fieldID fieldSet = 1 << iota
	fieldDst
	fieldGroup
	fieldReplica
	fieldFrom
	fieldTo
	fieldKind
	fieldAbout
	fieldBytes
)

var fieldNames = [...]string{"id", "dst", "group", "replica", "from", "to", "kind", "about", "bytes"}

// first returns the name of the lowest field of a non-empty s.
func (s fieldSet) first() string { return fieldNames[bits.TrailingZeros16(uint16(s))] }

// set returns the fields of r that hold a non-zero value.
func (r *Record) set() fieldSet {
	var s fieldSet
	for _, f := range [...]struct {
		bit fieldSet
		on  bool
	}{
		{fieldID, r.ID != ""}, {fieldDst, len(r.Dst) > 0}, {fieldGroup, r.Group != ""},
		{fieldReplica, r.Replica != ""}, {fieldFrom, r.From != ""}, {fieldTo, r.To != ""},
		{fieldKind, r.Kind != ""}, {fieldAbout, r.About != ""}, {fieldBytes, r.Bytes != 0},
	} {
		if f.on {
			s |= f.bit
		}
	}
	return s
}

// validate checks r against the format and returns the kind of a send (0 for
// other events). Its errors describe the problem without a prefix; callers
// wrap them with ErrMalformed and a location.
func (r *Record) validate() (multicast.Kind, error) {
	var want, allowed fieldSet
	switch r.Ev {
	case EvMulticast:
		want = fieldID | fieldDst
		allowed = want
	case EvDeliver:
		want = fieldGroup | fieldReplica | fieldID | fieldDst
		allowed = want
	case EvSend:
		want = fieldFrom | fieldTo | fieldKind | fieldAbout
		allowed = want | fieldBytes // a send of 0 bytes is fine
	case "":
		return 0, errors.New(`missing field "ev"`)
	default:
		return 0, fmt.Errorf("unknown ev %q", r.Ev)
	}
	have := r.set()
	if missing := want &^ have; missing != 0 {
		return 0, fmt.Errorf("%s record without %q", r.Ev, missing.first())
	}
	if extra := have &^ allowed; extra != 0 {
		return 0, fmt.Errorf("%s record with field %q", r.Ev, extra.first())
	}
	switch r.Ev {
	case EvMulticast, EvDeliver:
		if r.Ev == EvMulticast && IsFlush(r.ID) {
			return 0, fmt.Errorf("multicast of protocol-internal message %s", r.ID)
		}
		if err := validateDst(r.Dst); err != nil {
			return 0, fmt.Errorf("%s of %s: %w", r.Ev, r.ID, err)
		}
		return 0, nil
	default: // EvSend
		kind, err := multicast.ParseKind(r.Kind)
		if err != nil {
			return 0, fmt.Errorf("send with unknown kind %q", r.Kind)
		}
		if r.Bytes < 0 {
			return 0, fmt.Errorf("send with negative bytes %d", r.Bytes)
		}
		return kind, nil
	}
}

func validateDst(dst []string) error {
	for _, g := range dst {
		if g == "" {
			return errors.New("empty group name in dst")
		}
	}
	if len(dst) <= 8 { // the usual case: no allocation
		for i := range dst {
			if slices.Contains(dst[:i], dst[i]) {
				return fmt.Errorf("group %s twice in dst", dst[i])
			}
		}
	} else {
		sorted := slices.Clone(dst)
		slices.Sort(sorted)
		for i := 1; i < len(sorted); i++ {
			if sorted[i] == sorted[i-1] {
				return fmt.Errorf("group %s twice in dst", sorted[i])
			}
		}
	}
	return nil
}

// rawRecord decodes a line with presence information: a pointer is nil when
// its key is absent.
type rawRecord struct {
	Ev      *string  `json:"ev"`
	ID      *string  `json:"id"`
	Dst     []string `json:"dst"`
	Group   *string  `json:"group"`
	Replica *string  `json:"replica"`
	From    *string  `json:"from"`
	To      *string  `json:"to"`
	Kind    *string  `json:"kind"`
	About   *string  `json:"about"`
	Bytes   *int     `json:"bytes"`
}

// ParseRecord decodes and validates one log line. Unknown keys, trailing data
// and a send without "bytes" are errors wrapping ErrMalformed.
func ParseRecord(line []byte) (Record, error) {
	r, err := parseRecord(line)
	if err != nil {
		return Record{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	return r, nil
}

func parseRecord(line []byte) (Record, error) {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	var raw rawRecord
	if err := dec.Decode(&raw); err != nil {
		return Record{}, fmt.Errorf("bad json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return Record{}, errors.New("bad json: data after the object")
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	r := Record{
		Ev: str(raw.Ev), ID: str(raw.ID), Dst: raw.Dst, Group: str(raw.Group), Replica: str(raw.Replica),
		From: str(raw.From), To: str(raw.To), Kind: str(raw.Kind), About: str(raw.About),
	}
	if len(r.Dst) == 0 {
		r.Dst = nil // "dst":[] reads as no dst
	}
	if raw.Bytes != nil {
		r.Bytes = *raw.Bytes
	}
	if _, err := r.validate(); err != nil {
		return Record{}, err
	}
	if r.Ev == EvSend && raw.Bytes == nil {
		return Record{}, errors.New(`send record without "bytes"`)
	}
	return r, nil
}

// appendRecord appends r as one JSON line, with the keys in the order DESIGN
// 10.1 shows them. r must be valid.
func appendRecord(b []byte, r Record) ([]byte, error) {
	var v any
	switch r.Ev {
	case EvMulticast:
		v = struct {
			Ev  string   `json:"ev"`
			ID  string   `json:"id"`
			Dst []string `json:"dst"`
		}{r.Ev, r.ID, r.Dst}
	case EvDeliver:
		v = struct {
			Ev      string   `json:"ev"`
			Group   string   `json:"group"`
			Replica string   `json:"replica"`
			ID      string   `json:"id"`
			Dst     []string `json:"dst"`
		}{r.Ev, r.Group, r.Replica, r.ID, r.Dst}
	default:
		v = struct {
			Ev    string `json:"ev"`
			From  string `json:"from"`
			To    string `json:"to"`
			Kind  string `json:"kind"`
			About string `json:"about"`
			Bytes int    `json:"bytes"`
		}{r.Ev, r.From, r.To, r.Kind, r.About, r.Bytes}
	}
	line, err := json.Marshal(v)
	if err != nil {
		return b, fmt.Errorf("check: encode %s record: %w", r.Ev, err)
	}
	b = append(b, line...)
	return append(b, '\n'), nil
}

// ErrClosed is returned by a Writer after Close.
var ErrClosed = errors.New("check: log writer closed")

// Writer writes a delivery log, one JSON line per call, through a buffer.
// It is safe for concurrent use; the lines of concurrent calls do not
// interleave, and the lines of one goroutine keep its call order (so each
// replica's deliver lines are its delivery order when one goroutine writes
// them). Write errors are sticky: after one, every call returns it.
type Writer struct {
	mu     sync.Mutex
	buf    *bufio.Writer
	closer io.Closer // the file CreateFile opened, closed by Close; nil otherwise
	line   []byte
	err    error
	// resumes: the replicas whose deliveries a reopened file holds
	// (AppendFile), until each replica's replay is over; skipped counts
	// the deliveries left out.
	resumes map[loggedReplica]*resume
	skipped int
	marker  string // AppendFile's marker file, removed by Close
}

// NewWriter returns a Writer on w. Close flushes it but does not close w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{buf: bufio.NewWriterSize(w, 64<<10)}
}

// CreateFile creates (or truncates) the file at path and returns a Writer on
// it; Close flushes and closes the file.
func CreateFile(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	w := NewWriter(f)
	w.closer = f
	return w, nil
}

// Multicast writes that message id was multicast to dst.
func (w *Writer) Multicast(id string, dst []string) error {
	return w.Write(Record{Ev: EvMulticast, ID: id, Dst: dst})
}

// Deliver writes that replica of group delivered message id with
// destinations dst.
func (w *Writer) Deliver(group, replica, id string, dst []string) error {
	return w.Write(Record{Ev: EvDeliver, Group: group, Replica: replica, ID: id, Dst: dst})
}

// Send writes that group from sent group to a message of the given kind and
// size about message about.
func (w *Writer) Send(from, to, kind, about string, bytes int) error {
	return w.Write(Record{Ev: EvSend, From: from, To: to, Kind: kind, About: about, Bytes: bytes})
}

// Write validates r and writes it as one line. An invalid record is an error
// wrapping ErrMalformed and writes nothing. In a log reopened after a kill
// (AppendFile), a delivery that repeats the file's is left out, and one that
// departs from it is written after the deliveries left out before it.
func (w *Writer) Write(r Record) error {
	if _, err := r.validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	if r.Ev == EvDeliver && w.resumes != nil {
		k := loggedReplica{r.Group, r.Replica}
		if st := w.resumes[k]; st != nil {
			skip, again, over := st.resumed(&r)
			if over {
				delete(w.resumes, k)
				if len(w.resumes) == 0 {
					w.resumes = nil
				}
			}
			if skip {
				w.skipped++
				return nil
			}
			for _, a := range again {
				if err := w.writeLocked(Record{Ev: EvDeliver, Group: r.Group, Replica: r.Replica, ID: a.id, Dst: a.dst}); err != nil {
					return err
				}
			}
		}
	}
	return w.writeLocked(r)
}

// writeLocked writes the valid record r as one line, with w.mu held.
func (w *Writer) writeLocked(r Record) error {
	line, err := appendRecord(w.line[:0], r)
	if err != nil {
		return err
	}
	w.line = line
	// Whole lines only reach the file: a line that does not fit in the
	// buffer's room flushes the lines before it first (bufio would write
	// the part that fits), so that a reader of a log still being written,
	// such as a check waiting for the last deliveries, never meets half a
	// line. A line longer than the buffer is written whole, at once.
	if len(line) > w.buf.Available() && w.buf.Buffered() > 0 {
		if err := w.buf.Flush(); err != nil {
			w.err = fmt.Errorf("check: write log: %w", err)
			return w.err
		}
	}
	if _, err := w.buf.Write(line); err != nil {
		w.err = fmt.Errorf("check: write log: %w", err)
		return w.err
	}
	return nil
}

// Flush writes the buffered lines to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if w.err != nil {
		return w.err
	}
	if err := w.buf.Flush(); err != nil {
		w.err = fmt.Errorf("check: write log: %w", err)
	}
	return w.err
}

// Close flushes the buffered lines, closes the file of CreateFile, and makes
// every later call return ErrClosed (or the earlier write error).
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if errors.Is(w.err, ErrClosed) {
		return nil
	}
	err := w.flushLocked()
	if w.closer != nil {
		if cerr := w.closer.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("check: close log: %w", cerr)
		}
	}
	if w.marker != "" && err == nil {
		// Closed whole: the next AppendFile has nothing to resume.
		if rerr := os.Remove(w.marker); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = fmt.Errorf("check: close log: %w", rerr)
		}
	}
	if w.err == nil {
		w.err = ErrClosed
	}
	return err
}

// ReadLog reads the log at path: one file, or a directory whose *.jsonl files
// are read in name order, each file's lines in order. Blank lines are
// skipped. Errors name the file and the line.
func ReadLog(path string) ([]Record, error) {
	var recs []Record
	err := ScanLog(path, func(r Record) error {
		recs = append(recs, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return recs, nil
}

// ScanLog reads the log at path as ReadLog does and calls fn for each record
// without holding them all; it stops at the first error, fn's included (fn's
// error is wrapped with the file and line of the record).
func ScanLog(path string, fn func(Record) error) error {
	files, err := logFiles(path)
	if err != nil {
		return err
	}
	for _, name := range files {
		if err := scanFile(name, fn); err != nil {
			return err
		}
	}
	return nil
}

func logFiles(path string) ([]string, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	if !info.IsDir() {
		return []string{path}, nil
	}
	entries, err := os.ReadDir(path) // sorted by name
	if err != nil {
		return nil, fmt.Errorf("check: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && strings.HasSuffix(e.Name(), ".jsonl") {
			files = append(files, filepath.Join(path, e.Name()))
		}
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("check: no *.jsonl files in directory %s", path)
	}
	return files, nil
}

func scanFile(name string, fn func(Record) error) error {
	f, err := os.Open(name)
	if err != nil {
		return fmt.Errorf("check: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), LineBytesMax)
	line := 0
	for sc.Scan() {
		line++
		text := sc.Bytes()
		if len(bytes.TrimSpace(text)) == 0 {
			continue
		}
		r, err := parseRecord(text)
		if err != nil {
			return fmt.Errorf("%w: %s:%d: %w", ErrMalformed, name, line, err)
		}
		if err := fn(r); err != nil {
			return fmt.Errorf("%w (%s:%d)", err, name, line)
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("%w: %s:%d: line longer than %d bytes", ErrMalformed, name, line+1, LineBytesMax)
		}
		return fmt.Errorf("check: read %s:%d: %w", name, line+1, err)
	}
	return nil
}
