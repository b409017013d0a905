package check

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The three lines of DESIGN 10.1, byte for byte.
const designLines = `{"ev":"multicast","id":"c3.17","dst":["eu-west-1","eu-west-3"]}
{"ev":"deliver","group":"eu-west-1","replica":"r1","id":"c3.17","dst":["eu-west-1","eu-west-3"]}
{"ev":"send","from":"eu-west-1","to":"eu-west-3","kind":"msg","about":"c3.17","bytes":412}
`

func TestWriterFormat(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	dst := []string{"eu-west-1", "eu-west-3"}
	for _, err := range []error{
		w.Multicast("c3.17", dst),
		w.Deliver("eu-west-1", "r1", "c3.17", dst),
		w.Send("eu-west-1", "eu-west-3", "msg", "c3.17", 412),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if buf.Len() != 0 {
		t.Errorf("wrote %d bytes before Flush, want buffering", buf.Len())
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if got := buf.String(); got != designLines {
		t.Errorf("got\n%s\nwant\n%s", got, designLines)
	}
	if err := w.Send("a", "b", "msg", "c1.1", 0); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Count(buf.String(), "\n"), 4; got != want {
		t.Errorf("lines after Close = %d, want %d", got, want)
	}
	if !strings.HasSuffix(buf.String(), `"about":"c1.1","bytes":0}`+"\n") {
		t.Errorf("a send of 0 bytes must still carry bytes: %q", buf.String())
	}
	if err := w.Multicast("c1.2", dst); !errors.Is(err, ErrClosed) {
		t.Errorf("Multicast after Close = %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close = %v, want nil", err)
	}
}

func TestWriterRejectsInvalid(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf)
	for _, err := range []error{
		w.Multicast("", []string{"A"}),
		w.Multicast("c1.1", nil),
		w.Deliver("A", "", "c1.1", []string{"A"}),
		w.Send("A", "B", "gossip", "c1.1", 1),
	} {
		if !errors.Is(err, ErrMalformed) {
			t.Errorf("got %v, want ErrMalformed", err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != 0 {
		t.Errorf("invalid records wrote %q", buf.String())
	}
}

type failWriter struct{ err error }

func (f failWriter) Write([]byte) (int, error) { return 0, f.err }

func TestWriterStickyError(t *testing.T) {
	boom := errors.New("disk full")
	w := NewWriter(failWriter{boom})
	if err := w.Multicast("c1.1", []string{"A"}); err != nil {
		t.Fatalf("buffered write = %v, want nil", err)
	}
	if err := w.Flush(); !errors.Is(err, boom) {
		t.Fatalf("Flush = %v, want %v", err, boom)
	}
	if err := w.Multicast("c1.2", []string{"A"}); !errors.Is(err, boom) {
		t.Errorf("write after a failure = %v, want %v", err, boom)
	}
	if err := w.Close(); !errors.Is(err, boom) {
		t.Errorf("Close after a failure = %v, want %v", err, boom)
	}
}

// TestWriterConcurrent writes from many goroutines: every line must come out
// whole and each goroutine's lines in its order.
func TestWriterConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	w, err := CreateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	const writers, each = 8, 500
	var wg sync.WaitGroup
	for g := range writers {
		wg.Go(func() {
			group := fmt.Sprintf("g%d", g)
			for i := range each {
				if err := w.Deliver(group, "r1", fmt.Sprintf("c%d.%d", g, i), []string{group}); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(recs), writers*each; got != want {
		t.Fatalf("read %d records, want %d", got, want)
	}
	next := map[string]int{}
	for _, r := range recs {
		if want := fmt.Sprintf("c%s.%d", strings.TrimPrefix(r.Group, "g"), next[r.Group]); r.ID != want {
			t.Fatalf("group %s: got %s, want %s", r.Group, r.ID, want)
		}
		next[r.Group]++
	}
}

func TestParseRecord(t *testing.T) {
	good := []struct {
		line string
		want Record
	}{
		{`{"ev":"multicast","id":"c1.1","dst":["A"]}`, Record{Ev: EvMulticast, ID: "c1.1", Dst: []string{"A"}}},
		{` {"dst":["B","A"],"id":"x","ev":"multicast"} ` + "\r", Record{Ev: EvMulticast, ID: "x", Dst: []string{"B", "A"}}},
		{`{"ev":"send","from":"A","to":"B","kind":"vote","about":"c1.1","bytes":0}`, Record{Ev: EvSend, From: "A", To: "B", Kind: "vote", About: "c1.1"}},
		{`{"ev":"deliver","group":"A","replica":"r1","id":"c1.1","dst":["A"],"from":"","bytes":0}`, Record{Ev: EvDeliver, Group: "A", Replica: "r1", ID: "c1.1", Dst: []string{"A"}}},
	}
	for _, tt := range good {
		got, err := ParseRecord([]byte(tt.line))
		if err != nil {
			t.Errorf("ParseRecord(%s): %v", tt.line, err)
			continue
		}
		if diff := cmp.Diff(tt.want, got); diff != "" {
			t.Errorf("ParseRecord(%s) (-want +got):\n%s", tt.line, diff)
		}
	}
	bad := []struct{ line, want string }{
		{``, "bad json"},
		{`[]`, "bad json"},
		{`{"ev":"multicast","id":"c1.1","dst":["A"]} {}`, "data after the object"},
		{`{"ev":"multicast","id":"c1.1","dst":["A"],"ts":3}`, `unknown field "ts"`},
		{`{"ev":"multicast","id":"c1.1","dst":"A"}`, "bad json"},
		{`{"ev":"multicast","id":7,"dst":["A"]}`, "bad json"},
		{`{"ev":"multicast","id":"c1.1","dst":[]}`, `multicast record without "dst"`},
		{`{"ev":"multicast","id":"c1.1","dst":["A"],"group":"A"}`, `multicast record with field "group"`},
		{`{"ev":"deliver","group":"A","id":"c1.1","dst":["A"]}`, `deliver record without "replica"`},
		{`{"ev":"send","from":"A","to":"B","kind":"msg","about":"c1.1"}`, `send record without "bytes"`},
		{`{"ev":"send","from":"A","to":"B","kind":"msg","about":"c1.1","bytes":1.5}`, "bad json"},
		{`{"ev":"send","from":"A","to":"B","kind":"msg","about":"c1.1","bytes":-2}`, "negative bytes"},
		{`{"ev":"send","from":"A","to":"B","kind":"MSG","about":"c1.1","bytes":2}`, `unknown kind "MSG"`},
		{`{"ev":"recv"}`, `unknown ev "recv"`},
		{`{"id":"c1.1"}`, `missing field "ev"`},
	}
	for _, tt := range bad {
		_, err := ParseRecord([]byte(tt.line))
		if !errors.Is(err, ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("ParseRecord(%s) = %v, want ErrMalformed mentioning %q", tt.line, err, tt.want)
		}
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadLogDirectory(t *testing.T) {
	dir := t.TempDir()
	// Deliver lines in a file read before the one with the multicasts.
	writeFile(t, filepath.Join(dir, "a-deliver.jsonl"),
		`{"ev":"deliver","group":"A","replica":"r1","id":"c1.1","dst":["A","B"]}`+"\n\n"+
			`{"ev":"deliver","group":"A","replica":"r1","id":"c1.2","dst":["A"]}`+"\n")
	writeFile(t, filepath.Join(dir, "b-deliver.jsonl"),
		`{"ev":"deliver","group":"B","replica":"r1","id":"c1.1","dst":["A","B"]}`) // no final newline
	writeFile(t, filepath.Join(dir, "c-client.jsonl"),
		`{"ev":"multicast","id":"c1.1","dst":["A","B"]}`+"\n"+`{"ev":"multicast","id":"c1.2","dst":["A"]}`+"\n")
	writeFile(t, filepath.Join(dir, "notes.txt"), "not a log\n")
	if err := os.Mkdir(filepath.Join(dir, "sub.jsonl"), 0o755); err != nil {
		t.Fatal(err)
	}
	recs, err := ReadLog(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range recs {
		got = append(got, r.Ev+" "+r.Group+" "+r.ID)
	}
	want := []string{"deliver A c1.1", "deliver A c1.2", "deliver B c1.1", "multicast  c1.1", "multicast  c1.2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if rep := Check(recs, Options{Complete: true}); !rep.OK() {
		t.Errorf("got %s, want ok", rep.Summary())
	}
}

func TestReadLogErrors(t *testing.T) {
	dir := t.TempDir()
	good := `{"ev":"multicast","id":"c1.1","dst":["A"]}` + "\n"
	malformed := filepath.Join(dir, "malformed.jsonl")
	writeFile(t, malformed, good+good+`{"ev":"deliver","group":"A","id":"c1.1","dst":["A"]}`+"\n")
	long := filepath.Join(dir, "long.jsonl")
	writeFile(t, long, good+`{"ev":"multicast","id":"`+strings.Repeat("x", LineBytesMax)+`","dst":["A"]}`+"\n")
	empty := filepath.Join(dir, "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		path      string
		malformed bool
		want      string
	}{
		{malformed, true, malformed + `:3: deliver record without "replica"`},
		{long, true, long + ":2: line longer than"},
		{dir, true, long + ":2:"}, // files in name order: long.jsonl fails first
		{empty, false, "no *.jsonl files"},
		{filepath.Join(dir, "missing.jsonl"), false, "no such file"},
	}
	for _, tt := range tests {
		_, err := ReadLog(tt.path)
		if err == nil || !strings.Contains(err.Error(), tt.want) || errors.Is(err, ErrMalformed) != tt.malformed {
			t.Errorf("ReadLog(%s) = %v, want an error mentioning %q (malformed: %v)", tt.path, err, tt.want, tt.malformed)
		}
	}
}

func TestScanLogStopsOnCallbackError(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log.jsonl")
	line := `{"ev":"send","from":"A","to":"B","kind":"ack","about":"c1.1","bytes":3}` + "\n"
	writeFile(t, path, strings.Repeat(line, 5))
	c := New(Options{RecordsMax: 2})
	err := ScanLog(path, c.Add)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), path+":3") {
		t.Errorf("ScanLog = %v, want ErrLimit at %s:3", err, path)
	}
}

func FuzzReadRecord(f *testing.F) {
	for _, line := range strings.Split(strings.TrimSpace(designLines), "\n") {
		f.Add([]byte(line))
	}
	f.Add([]byte(`{"ev":"send","from":"A","to":"B","kind":"notif","about":"flush.1","bytes":0}`))
	f.Add([]byte(`{"ev":"deliver","group":"\u00e9\n","replica":"<r>","id":"c1.1","dst":["\u00e9\n","B"]}`))
	f.Add([]byte(`{"ev":"multicast","id":"c1.1","dst":["A","A"]}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseRecord(line)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error %v does not wrap ErrMalformed", err)
			}
			return
		}
		// A record that parses is written back as one line that parses to
		// the same record, and a Checker accepts it.
		b, err := appendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Count(b, []byte("\n")) != 1 {
			t.Fatalf("encoding %q is not one line", b)
		}
		again, err := ParseRecord(b)
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b, err)
		}
		if diff := cmp.Diff(r, again); diff != "" {
			t.Fatalf("round trip (-first +second):\n%s", diff)
		}
		if err := New(Options{}).Add(r); err != nil {
			t.Fatalf("Add(%+v): %v", r, err)
		}
	})
}

// chunks records every Write it gets.
type chunks struct{ got [][]byte }

func (c *chunks) Write(p []byte) (int, error) {
	c.got = append(c.got, bytes.Clone(p))
	return len(p), nil
}

// TestWriterWholeLines: what reaches the file, write by write, is whole
// lines, however the records fall against the buffer's size: a reader of
// a log still being written never meets half a line.
func TestWriterWholeLines(t *testing.T) {
	var c chunks
	w := NewWriter(&c)
	for i := range 20000 {
		id := fmt.Sprintf("c%d.%d", i%7, i)
		if err := w.Deliver("eu-west-1", "r1", id, []string{"eu-west-1", "g" + strings.Repeat("x", i%50)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if len(c.got) < 10 {
		t.Fatalf("%d writes: the test did not fill the buffer", len(c.got))
	}
	for i, b := range c.got {
		if len(b) == 0 || b[len(b)-1] != '\n' {
			t.Fatalf("write %d of %d ends inside a line: %q", i, len(c.got), b[max(0, len(b)-40):])
		}
	}
}
