package deploy

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/VictoriaMetrics/metricsql"
	dto "github.com/prometheus/client_model/go"

	"github.com/flexkv/flexkv/internal/testcluster"
)

// The expressions of the rules and the dashboard are parsed with
// github.com/VictoriaMetrics/metricsql rather than Prometheus' own
// promql/parser: that package's module (github.com/prometheus/prometheus)
// would pull new versions of golang.org/x/exp and github.com/golang/snappy,
// which Pebble links, and some 120 lines of go.sum, for a test. MetricsQL
// is a superset of PromQL, so promqlProblem refuses what PromQL lacks:
// functions outside PromQL's, a range function without a range, a range
// vector anywhere else, and MetricsQL's modifiers (limit, keep_metric_names,
// fill, prefix, or-filters).

// promqlFuncs are PromQL's functions that the files may call.
var promqlFuncs = []string{
	"abs", "absent", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min", "count_over_time",
	"delta", "deriv", "floor", "histogram_quantile", "idelta", "increase", "irate", "label_replace",
	"max_over_time", "min_over_time", "predict_linear", "rate", "resets", "round", "scalar",
	"sum_over_time", "time", "timestamp", "vector",
}

// rangeFuncs are the functions of promqlFuncs whose first argument is a
// range vector.
var rangeFuncs = []string{
	"avg_over_time", "changes", "count_over_time", "delta", "deriv", "idelta", "increase", "irate",
	"max_over_time", "min_over_time", "predict_linear", "rate", "resets", "sum_over_time",
}

// promqlAggrs are PromQL's aggregation operators.
var promqlAggrs = []string{"avg", "bottomk", "count", "count_values", "group", "max", "min", "quantile", "stddev", "stdvar", "sum", "topk"}

// scrapeWritten are the series Prometheus writes itself for every target,
// and the labels it (and prometheus.yml's relabelling) adds to every series.
var (
	scrapeWritten = []string{"up", "scrape_duration_seconds", "scrape_samples_scraped"}
	scrapeLabels  = []string{"job", "instance", "namespace", "pod"}
)

// exprProblem returns what is wrong with the PromQL expression expr of a
// rule or a panel: it does not parse as PromQL, or it names a series or a
// label that the scrape fams does not hold. Nil when nothing is.
func exprProblem(expr string, fams testcluster.Families) error {
	e, err := metricsql.Parse(expr)
	if err != nil {
		return fmt.Errorf("does not parse: %w", err)
	}
	if err := promqlProblem(e, false); err != nil {
		return fmt.Errorf("not PromQL: %w", err)
	}
	if metricsql.IsLikelyInvalid(e) {
		return errors.New("not PromQL: a range function without a range, or a range where none belongs")
	}
	labels := map[string]bool{}
	var problems []error
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		me, ok := x.(*metricsql.MetricExpr)
		if !ok || len(me.LabelFilterss) == 0 {
			return
		}
		name := ""
		for _, f := range me.LabelFilterss[0] {
			if f.Label == "__name__" {
				name = f.Value
			}
		}
		got, err := seriesLabels(name, fams)
		if err != nil {
			problems = append(problems, err)
			return
		}
		for _, f := range me.LabelFilterss[0] {
			if f.Label != "__name__" && !got[f.Label] {
				problems = append(problems, fmt.Errorf("%s has no label %q (it has %v)", name, f.Label, sortedKeys(got)))
			}
		}
		for l := range got { //flexkv:unordered a set's union
			labels[l] = true
		}
	})
	metricsql.VisitAll(e, func(x metricsql.Expr) {
		m, ok := x.(*metricsql.ModifierExpr)
		if !ok {
			return
		}
		for _, l := range m.Args {
			if !labels[l] {
				problems = append(problems, fmt.Errorf("%s(%s): no series of the expression has label %q", m.Op, strings.Join(m.Args, ", "), l))
			}
		}
	})
	return errors.Join(problems...)
}

// seriesLabels returns the labels of the series name in fams (those
// Prometheus adds included), or an error when fams has no such series: a
// histogram's _bucket, _count and _sum are its family's.
func seriesLabels(name string, fams testcluster.Families) (map[string]bool, error) {
	if name == "" {
		return nil, errors.New("a selector without a metric name")
	}
	out := map[string]bool{}
	for _, l := range scrapeLabels {
		out[l] = true
	}
	if slices.Contains(scrapeWritten, name) {
		return out, nil
	}
	fam := fams[name]
	if fam == nil {
		for _, suffix := range []string{"_bucket", "_count", "_sum"} {
			base, ok := strings.CutSuffix(name, suffix)
			if f := fams[base]; ok && f != nil && (f.GetType() == dto.MetricType_HISTOGRAM || (f.GetType() == dto.MetricType_SUMMARY && suffix != "_bucket")) {
				fam = f
				if suffix == "_bucket" {
					out["le"] = true
				}
			}
		}
	}
	if fam == nil || len(fam.GetMetric()) == 0 {
		return nil, fmt.Errorf("series %s: the server exports none", name)
	}
	for _, m := range fam.GetMetric() {
		for _, l := range m.GetLabel() {
			out[l.GetName()] = true
		}
	}
	return out, nil
}

// promqlProblem refuses what MetricsQL parses and PromQL does not; inRange
// says that e is the first argument of a range function.
func promqlProblem(e metricsql.Expr, inRange bool) error {
	switch x := e.(type) {
	case *metricsql.RollupExpr:
		if x.Window == nil || !inRange || x.Step != nil || x.At != nil {
			return fmt.Errorf("range %q: only a plain range, as the first argument of a range function", x.AppendString(nil))
		}
		return promqlProblem(x.Expr, false)
	case *metricsql.MetricExpr:
		if inRange {
			return fmt.Errorf("%s: a range function needs a range [d]", x.AppendString(nil))
		}
		if len(x.LabelFilterss) > 1 {
			return fmt.Errorf("%s: or-filters are MetricsQL's", x.AppendString(nil))
		}
		return nil
	case *metricsql.FuncExpr:
		if !slices.Contains(promqlFuncs, x.Name) || x.KeepMetricNames {
			return fmt.Errorf("function %s: not PromQL's", x.Name)
		}
		return argsProblem(x.Name, x.Args)
	case *metricsql.AggrFuncExpr:
		if !slices.Contains(promqlAggrs, x.Name) || x.Limit != 0 {
			return fmt.Errorf("aggregation %s: not PromQL's", x.AppendString(nil))
		}
		return argsProblem(x.Name, x.Args)
	case *metricsql.BinaryOpExpr:
		if x.KeepMetricNames || x.FillLeft != nil || x.FillRight != nil || x.JoinModifierPrefix != nil {
			return fmt.Errorf("%s: MetricsQL's modifiers", x.AppendString(nil))
		}
		return errors.Join(promqlProblem(x.Left, false), promqlProblem(x.Right, false))
	case *metricsql.NumberExpr, *metricsql.StringExpr:
		if inRange {
			return errors.New("a range function needs a range [d]")
		}
		return nil
	default:
		return fmt.Errorf("%T: not PromQL", e)
	}
}

// argsProblem checks the arguments of the function or aggregation name.
func argsProblem(name string, args []metricsql.Expr) error {
	var errs []error
	for i, a := range args {
		errs = append(errs, promqlProblem(a, i == 0 && slices.Contains(rangeFuncs, name)))
	}
	if slices.Contains(rangeFuncs, name) && len(args) == 0 {
		errs = append(errs, fmt.Errorf("%s() needs a range vector", name))
	}
	return errors.Join(errs...)
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m { //flexkv:unordered sorted below
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestExprProblem checks exprProblem on a scrape of two series: what it
// takes and what it refuses.
func TestExprProblem(t *testing.T) {
	fams := testcluster.ParseScrape(t, strings.NewReader(`# TYPE flexkv_busy gauge
flexkv_busy{group="g",replica="r1"} 0
# TYPE flexkv_request_seconds histogram
flexkv_request_seconds_bucket{group="g",replica="r1",method="Put",le="+Inf"} 1
flexkv_request_seconds_sum{group="g",replica="r1",method="Put"} 0.1
flexkv_request_seconds_count{group="g",replica="r1",method="Put"} 1
`))
	for _, tc := range []struct {
		expr string
		want string // in the error; "" for none
	}{
		{`max by (group) (flexkv_busy) == 1`, ""},
		{`histogram_quantile(0.99, sum by (method, le) (rate(flexkv_request_seconds_bucket{group=~".*"}[1m])))`, ""},
		{`sum(rate(flexkv_request_seconds_count[5m])) / sum(rate(flexkv_request_seconds_sum[5m]))`, ""},
		{`up{job=~"flexkv.*"} == 0`, ""},
		{`flexkv_nope > 0`, "exports none"},
		{`flexkv_busy{region="x"}`, `no label "region"`},
		{`sum by (region) (flexkv_busy)`, `label "region"`},
		{`flexkv_busy_bucket`, "exports none"},
		{`sum(rate(flexkv_busy))`, "needs a range"},
		{`flexkv_busy[5m] > 0`, "range"},
		{`median_over_time(flexkv_busy[5m])`, "not PromQL"},
		{`sum(flexkv_busy) by (group) limit 2`, "not PromQL"},
		{`sum(flexkv_busy`, "does not parse"},
	} {
		err := exprProblem(tc.expr, fams)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v, want no problem", tc.expr, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a problem with %q", tc.expr, err, tc.want)
		}
	}
}
