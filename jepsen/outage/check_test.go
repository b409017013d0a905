package outage_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flexkv/flexkv/jepsen/outage"
)

// TestLoops: the mixes around a fault of each of three groups.
func TestLoops(t *testing.T) {
	tests := []struct {
		mix         string
		g           int
		everySecond bool
		want        []string
	}{
		{outage.MixOthers, 1, false, []string{"eu-west-1<->eu-central-1 keeps"}},
		{outage.MixOthers, 0, false, []string{"eu-west-3<->eu-central-1 keeps"}},
		{outage.MixBoth, 2, false, []string{"eu-west-1<->eu-west-3 keeps", "eu-west-1<->eu-central-1 -", "eu-west-3<->eu-central-1 -"}},
		{"with-eu-central-1", 1, false, []string{"eu-west-1<->eu-central-1 keeps", "eu-west-3<->eu-central-1 -"}},
		{"with-eu-central-1", 2, false, nil},
		{outage.MixOwn, 1, true, []string{"eu-west-1<->eu-central-1 keeps-every-second", "eu-west-1 own keeps-every-second", "eu-central-1 own keeps-every-second"}},
	}
	for _, tt := range tests {
		loops, err := outage.Loops(tt.mix, 3, tt.g, tt.everySecond)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, l := range loops {
			want := string(l.Want)
			if want == "" {
				want = "-"
			}
			got = append(got, l.Name()+" "+want)
		}
		if strings.Join(got, ", ") != strings.Join(tt.want, ", ") {
			t.Errorf("Loops(%s, 3, %d): got %v, want %v", tt.mix, tt.g, got, tt.want)
		}
	}
	for _, mix := range []string{"most", "with-eu-north-1"} {
		if _, err := outage.Loops(mix, 3, 0, false); err == nil {
			t.Errorf("mix %q gave no error", mix)
		}
	}
}

// TestCheck: each want against rates that hold it and rates that do not.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		l    outage.LoopResult
		ok   bool
	}{
		{"keeps held", outage.LoopResult{Want: outage.Keeps, BeforeRate: 100, DuringRate: 50, AfterRate: 90}, true},
		{"keeps broken", outage.LoopResult{Want: outage.Keeps, BeforeRate: 100, DuringRate: 49, AfterRate: 90}, false},
		{"keeps, nothing after", outage.LoopResult{Want: outage.Keeps, BeforeRate: 100, DuringRate: 80}, false},
		{"keeps, nothing before", outage.LoopResult{Want: outage.Keeps, DuringRate: 80, AfterRate: 90}, false},
		{"every second held", outage.LoopResult{Want: outage.KeepsEverySecond, BeforeRate: 100, DuringRate: 90, DuringMin: 50, AfterRate: 90}, true},
		{"a second at zero", outage.LoopResult{Want: outage.KeepsEverySecond, BeforeRate: 100, DuringRate: 80, DuringMin: 0, AfterRate: 90}, false},
		{"stops held, still stopped after", outage.LoopResult{Want: outage.Stops, BeforeRate: 100, During: []int{90, 10, 0}, DuringRate: 33}, true},
		{"stops broken", outage.LoopResult{Want: outage.Stops, BeforeRate: 100, During: []int{90, 20, 10}, DuringRate: 40, AfterRate: 90}, false},
		{"any", outage.LoopResult{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if why := tt.l.Check(); (why == "") != tt.ok {
				t.Errorf("Check() = %q, want ok %v", why, tt.ok)
			}
		})
	}
}

// TestReport: the table says FAIL for a broken want, and the CSV has one
// row per loop and second.
func TestReport(t *testing.T) {
	results := []*outage.Result{{
		Protocol: "flexcast", Scenario: "cut eu-west-3", Fault: outage.CutPeers, Group: "eu-west-3", Target: "eu-west-3",
		Loops: []outage.LoopResult{{
			Loop: "eu-west-1<->eu-central-1", Want: outage.Keeps, Before: []int{100, 100}, During: []int{0, 0, 0}, After: []int{90},
			BeforeRate: 100, AfterRate: 90,
		}},
	}}
	var table, csv, js bytes.Buffer
	if err := outage.Table(&table, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(table.String(), "FAIL") || !strings.Contains(table.String(), "100 100 | 0 0 0 | 90") {
		t.Errorf("table:\n%s", table.String())
	}
	if err := outage.WriteCSV(&csv, results); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(csv.String(), "\n"); n != 1+6 {
		t.Errorf("csv has %d lines, want a header and 6 rows:\n%s", n, csv.String())
	}
	if err := outage.WriteJSON(&js, results); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(js.String(), `"during_per_s": 0`) {
		t.Errorf("json:\n%s", js.String())
	}
}
