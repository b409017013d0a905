package check

import (
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
