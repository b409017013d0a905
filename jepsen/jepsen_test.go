package jepsen

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flexkv/flexkv/jepsen/checker"
	"github.com/flexkv/flexkv/jepsen/history"
	"github.com/flexkv/flexkv/jepsen/hosts"
)

// The flags of make jepsen; their defaults are the short run of
// `go test ./...` (make test).
var (
	durationFlag  = flag.Duration("jepsen.duration", 12*time.Second, "how long each protocol's run lasts")
	protocolsFlag = flag.String("jepsen.protocols", "flexcast,skeen,tree", "the protocols to run, comma-separated")
	seedFlag      = flag.Uint64("jepsen.seed", 0, "the seed of the workload and the fault schedule (0: from the clock, printed)")
	outFlag       = flag.String("jepsen.out", "", "where each protocol's history.jsonl and verdict.txt go, under <protocol>/ (default: a temporary directory)")
	modelFlag     = flag.String("jepsen.model", string(checker.StrictSerializable), "the model a run must satisfy: strict-serializable or serializable")
	historyFlag   = flag.String("jepsen.history", "", "TestCheckHistory: the history file to check")
	faultsFlag    = flag.String("jepsen.faults", "", "the fault kinds of the nemesis, comma-separated (default: every kind)")
)

// TestJepsen runs each protocol on nine hosts under faults and checks the
// history; it fails on any anomaly the model forbids.
func TestJepsen(t *testing.T) {
	if testing.Short() {
		t.Skip("starts nine server processes per protocol")
	}
	if err := hosts.Available(); err != nil {
		t.Skipf("no host harness here: %v", err)
	}
	model, err := checker.ParseModel(*modelFlag)
	if err != nil {
		t.Fatal(err)
	}
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano()%1_000_000 + 1)
	}
	out := *outFlag
	if out == "" {
		out = t.TempDir()
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "flexkv")
	if err := hosts.Build(context.Background(), root, bin); err != nil {
		t.Fatal(err)
	}
	kinds := Kinds
	if *faultsFlag != "" {
		kinds = strings.Split(*faultsFlag, ",")
		for _, k := range kinds {
			if !slices.Contains(Kinds, k) {
				t.Fatalf("-jepsen.faults: %q is not a fault kind (the kinds: %s)", k, strings.Join(Kinds, ", "))
			}
		}
	}
	var summaries []string
	for _, p := range strings.Split(*protocolsFlag, ",") {
		t.Run(p, func(t *testing.T) {
			rep, err := Run(context.Background(), Config{
				Binary: bin, Out: filepath.Join(out, p), Protocol: p, Duration: *durationFlag, Seed: seed, Model: model,
				Kinds: kinds, Logf: t.Logf,
			})
			if err != nil {
				t.Fatal(err)
			}
			summaries = append(summaries, rep.Summary())
			if rep.Violations() > 0 {
				t.Errorf("%s", rep.Text())
			} else {
				t.Log(rep.Text())
			}
			if rep.Result.OK == 0 {
				t.Errorf("no operation completed: %s", rep.Summary())
			}
			// A run under a minute leads with an overlay change; a longer
			// one has time to cycle through every kind.
			var want []string
			switch {
			case *durationFlag >= time.Minute:
				want = kinds
			case slices.Contains(kinds, Overlay):
				want = []string{Overlay}
			}
			for _, k := range want {
				if rep.Made(k) == 0 {
					t.Errorf("no %s fault made and healed: %s", k, rep.Summary())
				}
			}
		})
	}
	t.Logf("replay the schedule: make jepsen SEED=%d; results:\n%s", seed, strings.Join(summaries, "\n"))
}

// TestCheckHistory checks a history file again (-jepsen.history=FILE),
// as make jepsen wrote it.
func TestCheckHistory(t *testing.T) {
	if *historyFlag == "" {
		t.Skip("give -jepsen.history=FILE")
	}
	f, err := os.Open(*historyFlag)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := history.Read(f)
	if err != nil {
		t.Fatal(err)
	}
	model, err := checker.ParseModel(*modelFlag)
	if err != nil {
		t.Fatal(err)
	}
	rep := &Report{Protocol: filepath.Base(filepath.Dir(*historyFlag)), Model: model, History: *historyFlag,
		Result: checker.Check(h, checker.Options{}), Unavailable: Unavailability(h), Faults: Faults(h)}
	t.Log(rep.Text())
	if rep.Violations() > 0 {
		t.Errorf("%d anomalies under %s", rep.Violations(), model)
	}
}

// TestUnavailability: the longest gap between ok transactions is counted
// for the fault under way, and the quiet gaps as none.
func TestUnavailability(t *testing.T) {
	const s = int64(time.Second)
	lines := []history.Op{
		{TimeNs: 0, Process: 1, Type: history.Invoke, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", nil)}},
		{TimeNs: 1 * s, Process: 1, Type: history.OK, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", []int64{})}},
		{TimeNs: 2 * s, Process: history.NemesisProcess, Type: history.Info, F: Partition, Fault: &history.Fault{Phase: history.PhaseStart, Target: "g"}},
		{TimeNs: 2 * s, Process: 1, Type: history.Invoke, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", nil)}},
		{TimeNs: 6 * s, Process: history.NemesisProcess, Type: history.Info, F: Partition, Fault: &history.Fault{Phase: history.PhaseEnd, Target: "g"}},
		{TimeNs: 7 * s, Process: 1, Type: history.OK, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", []int64{})}},
		{TimeNs: 8 * s, Process: 1, Type: history.Invoke, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", nil)}},
		{TimeNs: 10 * s, Process: 1, Type: history.OK, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", []int64{})}},
		// A gap over two faults is the first's.
		{TimeNs: 11 * s, Process: history.NemesisProcess, Type: history.Info, F: KillLeader, Fault: &history.Fault{Phase: history.PhaseStart, Target: "r1"}},
		{TimeNs: 11 * s, Process: 1, Type: history.Invoke, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", nil)}},
		{TimeNs: 12 * s, Process: history.NemesisProcess, Type: history.Info, F: KillLeader, Fault: &history.Fault{Phase: history.PhaseEnd, Target: "r1"}},
		{TimeNs: 13 * s, Process: history.NemesisProcess, Type: history.Info, F: DiskFull, Fault: &history.Fault{Phase: history.PhaseStart, Target: "r2"}},
		{TimeNs: 14 * s, Process: 1, Type: history.OK, F: history.FTxn, Mops: []history.Mop{history.ReadList("k", []int64{})}},
		{TimeNs: 15 * s, Process: history.NemesisProcess, Type: history.Info, F: DiskFull, Fault: &history.Fault{Phase: history.PhaseEnd, Target: "r2"}},
	}
	h := &history.History{}
	for i, op := range lines {
		op.Index = int64(i)
		h.Ops = append(h.Ops, op)
	}
	got := Unavailability(h)
	want := []Gap{
		{Kind: DiskFull, Length: time.Second, At: 14 * time.Second},
		{Kind: KillLeader, Length: 4 * time.Second, At: 10 * time.Second},
		{Kind: "none", Length: 3 * time.Second, At: 7 * time.Second},
		{Kind: Partition, Length: 6 * time.Second, At: time.Second},
	}
	if !slices.Equal(got, want) {
		t.Errorf("gaps %v, want %v", got, want)
	}
	// Faults counts the ended faults: an open one is not counted.
	h.Ops = append(h.Ops, history.Op{Index: int64(len(h.Ops)), TimeNs: 16 * s, Process: history.NemesisProcess, Type: history.Info, F: Overlay,
		Fault: &history.Fault{Phase: history.PhaseStart, Target: "cluster"}})
	faults := Faults(h)
	wantFaults := []FaultCount{{DiskFull, 1}, {KillLeader, 1}, {Partition, 1}}
	if !slices.Equal(faults, wantFaults) {
		t.Errorf("faults %v, want %v", faults, wantFaults)
	}
}
