package outage_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flexkv/flexkv/jepsen/hosts"
	"github.com/flexkv/flexkv/jepsen/outage"
)

// The flags of make outage. TestOutage runs only when -outage.protocols
// names protocols; the claims are held by the short tests below.
var (
	protocolsFlag = flag.String("outage.protocols", "", "TestOutage: the protocols to measure, comma-separated (empty: TestOutage skips; make outage sets it)")
	groupsFlag    = flag.String("outage.groups", "eu-west-1,eu-west-3,eu-central-1", "TestOutage: the groups faulted, one after the other, comma-separated")
	faultsFlag    = flag.String("outage.faults", "cut", "TestOutage: the faults, comma-separated: cut (the group's peer traffic dropped), kill-leader")
	mixesFlag     = flag.String("outage.mixes", "", "TestOutage: the loops beside each fault, comma-separated: others, both, own, with-GROUP (empty: others,both for a cut, own for a leader kill)")
	holdFlag      = flag.Duration("outage.hold", 15*time.Second, "TestOutage: how long each fault holds")
	beforeFlag    = flag.Duration("outage.before", 8*time.Second, "TestOutage: the window counted before each fault")
	afterFlag     = flag.Duration("outage.after", 8*time.Second, "TestOutage: the window counted after each heal")
	workersFlag   = flag.Int("outage.workers", 4, "TestOutage: the transfers in flight per loop")
	outFlag       = flag.String("outage.out", "", "TestOutage: where outage.txt, outage.json and outage.csv go (default: a temporary directory)")
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binary builds the flexkv binary once for the package's tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs("../..")
		if err != nil {
			buildErr = err
			return
		}
		binDir, err = os.MkdirTemp("", "flexkv-outage")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(binDir, "flexkv")
		buildErr = hosts.Build(context.Background(), root, binPath)
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// startCluster starts nine hosts running protocol, or skips the test naming
// what the machine lacks; its cleanup closes the cluster.
func startCluster(t *testing.T, protocol string) *hosts.Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts nine server processes per protocol")
	}
	if err := hosts.Available(); err != nil {
		t.Skipf("no host harness here: %v", err)
	}
	bin := binary(t)
	c, err := hosts.Start(context.Background(), hosts.Config{
		Binary: bin, Dir: filepath.Join(t.TempDir(), "run"), Protocol: protocol, DiskBytes: 256 << 20, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return c
}

// claim is one protocol's scenarios with what each loop should keep.
type claim struct {
	protocol  string
	scenarios []outage.Scenario
}

// runClaims runs each claim's scenarios on a cluster of its protocol and
// fails on every loop that did not do what it wants.
func runClaims(t *testing.T, claims []claim, w outage.Windows) {
	for _, cl := range claims {
		t.Run(cl.protocol, func(t *testing.T) {
			c := startCluster(t, cl.protocol)
			var results []*outage.Result
			for _, s := range cl.scenarios {
				r, err := outage.Run(context.Background(), outage.Config{Cluster: c, Protocol: cl.protocol, Windows: w, Logf: t.Logf}, s)
				if err != nil {
					t.Fatalf("%s: %v", s.Name(), err)
				}
				results = append(results, r)
				for _, l := range r.Loops {
					if why := l.Check(); why != "" {
						t.Errorf("%s %s: %s", cl.protocol, s.Name(), why)
					}
				}
			}
			var b bytes.Buffer
			if err := outage.Table(&b, results); err != nil {
				t.Fatal(err)
			}
			t.Logf("\n%s", b.String())
		})
	}
}

// The three groups by rank, as configs/local.yaml's overlay; the tree's
// root is the lowest (hosts.Cluster's configuration).
const (
	euWest1    = 0
	euWest3    = 1
	euCentral1 = 2
)

// TestCutKeepsOtherGroups: while eu-west-3 is cut off from the other
// groups (its peer traffic dropped, both ways), transfers between
// eu-west-1 and eu-central-1, which never name it, keep at least half
// their rate (issue 32, row 2), under every protocol: FlexCast and Skeen
// are genuine, and the tree's path between them (the root eu-west-1 and
// its child eu-central-1) does not pass through the cut leaf. Cut the
// tree's root instead, and transfers between its two children stop
// (docs/design.md 3.4: what travels through a cut inner group stops).
func TestCutKeepsOtherGroups(t *testing.T) {
	cutMiddle := outage.Scenario{Fault: outage.CutPeers, Group: euWest3, Loops: []outage.Loop{{A: euWest1, B: euCentral1, Want: outage.Keeps}}}
	runClaims(t, []claim{
		{protocol: "flexcast", scenarios: []outage.Scenario{cutMiddle}},
		{protocol: "skeen", scenarios: []outage.Scenario{cutMiddle}},
		{protocol: "tree", scenarios: []outage.Scenario{cutMiddle,
			{Fault: outage.CutPeers, Group: euWest1, Loops: []outage.Loop{{A: euWest3, B: euCentral1, Want: outage.Stops}}}}},
	}, outage.Windows{Warmup: time.Second, Before: 3 * time.Second, Hold: 8 * time.Second, After: 2 * time.Second})
}

// TestLeaderKillKeepsOtherGroups: SIGKILL of eu-west-3's leader leaves the
// other groups' own transfers and those between them at least half their
// rate in every second of the election and after (issue 32: a leader kill
// in one group stopped the whole cluster for one to two seconds).
func TestLeaderKillKeepsOtherGroups(t *testing.T) {
	loops, err := outage.Loops(outage.MixOwn, 3, euWest3, true)
	if err != nil {
		t.Fatal(err)
	}
	kill := outage.Scenario{Fault: outage.KillLeader, Group: euWest3, Loops: loops}
	var claims []claim
	for _, p := range []string{"flexcast", "skeen", "tree"} {
		claims = append(claims, claim{protocol: p, scenarios: []outage.Scenario{kill}})
	}
	runClaims(t, claims, outage.Windows{Warmup: time.Second, Before: 3 * time.Second, Hold: 4 * time.Second, After: 2 * time.Second})
}

// TestOutage is make outage: each protocol on a cluster of its own, each
// fault of each group in turn with each mix of loops, the table logged and
// written with its JSON and CSV to -outage.out.
func TestOutage(t *testing.T) {
	if *protocolsFlag == "" {
		t.Skip("make outage runs it: give -outage.protocols")
	}
	var groups []int
	for _, name := range strings.Split(*groupsFlag, ",") {
		g := slices.IndexFunc([]string{hosts.GroupName(0), hosts.GroupName(1), hosts.GroupName(2)}, func(s string) bool { return s == strings.TrimSpace(name) })
		if g < 0 {
			t.Fatalf("-outage.groups: no group %q among %s, %s, %s", name, hosts.GroupName(0), hosts.GroupName(1), hosts.GroupName(2))
		}
		groups = append(groups, g)
	}
	var scenarios []outage.Scenario
	for _, fs := range strings.Split(*faultsFlag, ",") {
		f, err := outage.ParseFault(strings.TrimSpace(fs))
		if err != nil {
			t.Fatal(err)
		}
		mixes := *mixesFlag
		if mixes == "" {
			mixes = map[outage.Fault]string{outage.CutPeers: outage.MixOthers + "," + outage.MixBoth, outage.KillLeader: outage.MixOwn}[f]
		}
		for _, g := range groups {
			for _, mix := range strings.Split(mixes, ",") {
				loops, err := outage.Loops(strings.TrimSpace(mix), 3, g, f == outage.KillLeader)
				if err != nil {
					t.Fatal(err)
				}
				if len(loops) == 0 {
					continue // with-G for G's own fault
				}
				scenarios = append(scenarios, outage.Scenario{Fault: f, Group: g, Loops: loops, Mix: strings.TrimSpace(mix)})
			}
		}
	}
	out := *outFlag
	if out == "" {
		out = t.TempDir()
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	w := outage.Windows{Warmup: 3 * time.Second, Before: *beforeFlag, Hold: *holdFlag, After: *afterFlag}
	var results []*outage.Result
	for _, p := range strings.Split(*protocolsFlag, ",") {
		p = strings.TrimSpace(p)
		t.Run(p, func(t *testing.T) {
			c := startCluster(t, p)
			for _, s := range scenarios {
				r, err := outage.Run(context.Background(), outage.Config{Cluster: c, Protocol: p, Windows: w, Workers: *workersFlag, Logf: t.Logf}, s)
				if err != nil {
					t.Fatalf("%s: %v", s.Name(), err)
				}
				results = append(results, r)
				var b bytes.Buffer
				if err := outage.Table(&b, []*outage.Result{r}); err != nil {
					t.Fatal(err)
				}
				t.Logf("\n%s", b.String())
			}
		})
	}
	write := func(name string, f func(*bytes.Buffer) error) {
		var b bytes.Buffer
		if err := f(&b); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("outage.txt", func(b *bytes.Buffer) error { return outage.Table(b, results) })
	write("outage.json", func(b *bytes.Buffer) error { return outage.WriteJSON(b, results) })
	write("outage.csv", func(b *bytes.Buffer) error { return outage.WriteCSV(b, results) })
	var b bytes.Buffer
	_ = outage.Table(&b, results)
	fmt.Fprintf(os.Stdout, "\n%s\nwritten: %s/outage.{txt,json,csv}\n", b.String(), out)
}
