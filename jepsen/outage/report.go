package outage

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Table writes one line per loop of every result: the rates before, during
// and after the fault, the slowest second of the fault, how long after the
// heal the first transfer completed ("-": none in the window), the ratio during
// over before, the claim and whether it held, and the seconds themselves.
func Table(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "protocol\tfault\ttarget\tloop\tbefore/s\tduring/s\tmin/s\tafter/s\tresumed\tduring/before\twant\tverdict\terrors\tper second (before | during | after)")
	for _, r := range results {
		for _, l := range r.Loops {
			verdict := "-"
			if l.Want != Any {
				verdict = "ok"
				if l.Check() != "" {
					verdict = "FAIL"
				}
			}
			want := string(l.Want)
			if want == "" {
				want = "-"
			}
			resumed := "-"
			if l.ResumedMs >= 0 {
				resumed = strconv.FormatFloat(float64(l.ResumedMs)/1000, 'f', 1, 64) + "s"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.0f\t%.0f\t%d\t%.0f\t%s\t%.2f\t%s\t%s\t%d\t%s | %s | %s\n",
				r.Protocol, r.Scenario, r.Target, l.Loop, l.BeforeRate, l.DuringRate, l.DuringMin, l.AfterRate, resumed, l.Ratio(),
				want, verdict, l.Errors, ints(l.Before), ints(l.During), ints(l.After))
		}
	}
	return tw.Flush()
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, " ")
}

// WriteJSON writes the results as one indented JSON array.
func WriteJSON(w io.Writer, results []*Result) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(results)
}

// WriteCSV writes one row per loop and second:
// protocol,scenario,target,loop,window,second,transfers; window is before,
// during or after, second counts from 0 within it.
func WriteCSV(w io.Writer, results []*Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write([]string{"protocol", "scenario", "target", "loop", "window", "second", "transfers"}); err != nil {
		return err
	}
	for _, r := range results {
		for _, l := range r.Loops {
			for _, win := range []struct {
				name string
				xs   []int
			}{{"before", l.Before}, {"during", l.During}, {"after", l.After}} {
				for i, x := range win.xs {
					if err := cw.Write([]string{r.Protocol, r.Scenario, r.Target, l.Loop, win.name, strconv.Itoa(i), strconv.Itoa(x)}); err != nil {
						return err
					}
				}
			}
		}
	}
	cw.Flush()
	return cw.Error()
}
