package check

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// deliveries returns, for each group/replica of the log at path, the ids it
// delivered in the log's order.
func deliveries(t *testing.T, path string) map[string][]string {
	t.Helper()
	recs, err := ReadLog(path)
	if err != nil {
		t.Fatalf("ReadLog: %v", err)
	}
	out := map[string][]string{}
	for _, r := range recs {
		if r.Ev == EvDeliver {
			k := r.Group + "/" + r.Replica
			out[k] = append(out[k], r.ID)
		}
	}
	return out
}

// killed leaves the log at path as a writer killed after writing it does:
// its marker beside it.
func killed(t *testing.T, path string) {
	t.Helper()
	if err := os.WriteFile(path+openMarkerSuffix, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestAppendFileSkipsReplayedDeliveries(t *testing.T) {
	dst := []string{"g"}
	for _, tc := range []struct {
		name           string
		before, replay []string // r1's deliveries in the file, then after reopening
		want           []string
	}{
		{"a kill: the replay repeats the file's last deliveries", []string{"c1.1", "c1.2", "c1.3", "c1.4"}, []string{"c1.2", "c1.3", "c1.4", "c1.5"}, []string{"c1.1", "c1.2", "c1.3", "c1.4", "c1.5"}},
		{"a graceful restart: nothing repeated", []string{"c1.1", "c1.2"}, []string{"c1.3"}, []string{"c1.1", "c1.2", "c1.3"}},
		{"lines lost with the process: the replay goes past the file", []string{"c1.1", "c1.2"}, []string{"c1.2", "c1.3", "c1.4"}, []string{"c1.1", "c1.2", "c1.3", "c1.4"}},
		{"a replay that departs from the file is written whole", []string{"c1.1", "c1.2", "c1.3", "c1.4"}, []string{"c1.2", "c1.3", "c1.9", "c1.4"}, []string{"c1.1", "c1.2", "c1.3", "c1.4", "c1.2", "c1.3", "c1.9", "c1.4"}},
		{"a departure at the first repeat", []string{"c1.1", "c1.2", "c1.3"}, []string{"c1.2", "c1.1"}, []string{"c1.1", "c1.2", "c1.3", "c1.2", "c1.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "r1.jsonl")
			w, err := CreateFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range tc.before {
				must(t, w.Multicast(id, dst))
				must(t, w.Deliver("g", "r1", id, dst))
				must(t, w.Deliver("g", "r2", id, dst))
			}
			must(t, w.Close())
			killed(t, path)

			w, err = AppendFile(path)
			if err != nil {
				t.Fatalf("AppendFile: %v", err)
			}
			for _, id := range tc.replay {
				must(t, w.Multicast(id, dst)) // a multicast line may come again
				must(t, w.Deliver("g", "r1", id, dst))
			}
			// r2 did not restart: its next delivery is new.
			must(t, w.Deliver("g", "r2", "c2.1", dst))
			must(t, w.Close())

			got := deliveries(t, path)
			if diff := cmp.Diff(tc.want, got["g/r1"]); diff != "" {
				t.Errorf("r1's deliveries (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(append(append([]string(nil), tc.before...), "c2.1"), got["g/r2"]); diff != "" {
				t.Errorf("r2's deliveries (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppendFileResumeKeepsDestinations(t *testing.T) {
	// A repeat of an id with other destinations is a departure, not a
	// replay.
	path := filepath.Join(t.TempDir(), "r1.jsonl")
	w, err := CreateFile(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Deliver("g", "r1", "c1.1", []string{"g", "h"}))
	must(t, w.Close())
	killed(t, path)
	if w, err = AppendFile(path); err != nil {
		t.Fatal(err)
	}
	must(t, w.Deliver("g", "r1", "c1.1", []string{"g"}))
	must(t, w.Close())
	if got := deliveries(t, path)["g/r1"]; len(got) != 2 {
		t.Fatalf("deliveries %v, want c1.1 twice", got)
	}
}

func TestAppendFileNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "new.jsonl")
	w, err := AppendFile(path)
	if err != nil {
		t.Fatalf("AppendFile of a new file: %v", err)
	}
	must(t, w.Deliver("g", "r1", "c1.1", []string{"g"}))
	must(t, w.Close())
	if got := deliveries(t, path)["g/r1"]; !cmp.Equal(got, []string{"c1.1"}) {
		t.Fatalf("deliveries %v", got)
	}
	if _, err := AppendFile(t.TempDir()); err == nil {
		t.Fatal("AppendFile of a directory: no error")
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestAppendFileAfterCleanClose(t *testing.T) {
	// A writer that closed leaves nothing to resume: a replica that
	// delivers again what it delivered before its graceful restart shows in
	// the log.
	path := filepath.Join(t.TempDir(), "r1.jsonl")
	dst := []string{"g"}
	w, err := AppendFile(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Deliver("g", "r1", "c1.1", dst))
	must(t, w.Deliver("g", "r1", "c1.2", dst))
	must(t, w.Close())
	if _, err := os.Stat(path + openMarkerSuffix); !os.IsNotExist(err) {
		t.Fatalf("marker after Close: %v", err)
	}
	if w, err = AppendFile(path); err != nil {
		t.Fatal(err)
	}
	must(t, w.Deliver("g", "r1", "c1.2", dst))
	must(t, w.Close())
	if got := deliveries(t, path)["g/r1"]; !cmp.Equal(got, []string{"c1.1", "c1.2", "c1.2"}) {
		t.Fatalf("deliveries %v, want c1.2 twice", got)
	}
	if w.Skipped() != 0 {
		t.Fatalf("Skipped %d after a clean close", w.Skipped())
	}
}

func TestAppendFileCutsPartialLine(t *testing.T) {
	path := filepath.Join(t.TempDir(), "r1.jsonl")
	whole := `{"ev":"deliver","group":"g","replica":"r1","id":"c1.1","dst":["g"]}` + "\n"
	must(t, os.WriteFile(path, []byte(whole+`{"ev":"deliver","group":"g","repl`), 0o644))
	killed(t, path)
	w, err := AppendFile(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, w.Deliver("g", "r1", "c1.1", []string{"g"})) // the replay
	must(t, w.Deliver("g", "r1", "c1.2", []string{"g"}))
	must(t, w.Close())
	if got := deliveries(t, path)["g/r1"]; !cmp.Equal(got, []string{"c1.1", "c1.2"}) {
		t.Fatalf("deliveries %v", got)
	}
	if w.Skipped() != 1 {
		t.Fatalf("Skipped %d, want 1", w.Skipped())
	}
}

func TestAppendFileTailBound(t *testing.T) {
	// The file holds more than resumeTailMax deliveries of the replica: a
	// replay of its last resumeTailMax is left out whole; one that starts
	// before them is written.
	dst := []string{"g"}
	id := func(i int) string { return fmt.Sprintf("c1.%d", i+1) }
	total := resumeTailMax + resumeTailMax/2
	for _, tc := range []struct {
		from int
		skip int
	}{{total - resumeTailMax, resumeTailMax}, {total - resumeTailMax - 1, 0}} {
		path := filepath.Join(t.TempDir(), "r1.jsonl")
		w, err := CreateFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range total {
			must(t, w.Deliver("g", "r1", id(i), dst))
		}
		must(t, w.Close())
		killed(t, path)
		if w, err = AppendFile(path); err != nil {
			t.Fatal(err)
		}
		for i := tc.from; i <= total; i++ {
			must(t, w.Deliver("g", "r1", id(i), dst))
		}
		must(t, w.Close())
		if w.Skipped() != tc.skip {
			t.Errorf("replay from %d: Skipped %d, want %d", tc.from, w.Skipped(), tc.skip)
		}
		if got, want := len(deliveries(t, path)["g/r1"]), total+1+(total-tc.from-tc.skip); got != want {
			t.Errorf("replay from %d: %d deliveries in the log, want %d", tc.from, got, want)
		}
	}
}
