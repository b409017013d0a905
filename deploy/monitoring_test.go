package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/flexkv/flexkv/cluster"
	"github.com/flexkv/flexkv/internal/testaddr"
	"github.com/flexkv/flexkv/internal/testcluster"
)

// The files this package checks.
const (
	prometheusFile = "prometheus/prometheus.yml"
	rulesFile      = "prometheus/flexkv-alerts.yml"
	dashboardFile  = "grafana/flexkv.json"
)

// promConfig is the part of Prometheus' configuration that prometheus.yml
// uses; decoding refuses any other field, so a misspelt key fails here
// rather than being ignored by Prometheus' own loader's defaults.
type promConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName             string `yaml:"job_name"`
		KubernetesSDConfigs []struct {
			Role string `yaml:"role"`
		} `yaml:"kubernetes_sd_configs"`
		RelabelConfigs []struct {
			SourceLabels []string `yaml:"source_labels"`
			Regex        string   `yaml:"regex"`
			Action       string   `yaml:"action"`
			TargetLabel  string   `yaml:"target_label"`
		} `yaml:"relabel_configs"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

// ruleFile is Prometheus' rule file format, alerting rules only.
type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// dashboard is the part of a Grafana dashboard that the checks read.
type dashboard struct {
	UID        string `json:"uid"`
	Title      string `json:"title"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct {
		H, W, X, Y int
	} `json:"gridPos"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// decodeYAML decodes file into v, refusing unknown fields.
func decodeYAML(t *testing.T, file string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d := yaml.NewDecoder(bytes.NewReader(b))
	d.KnownFields(true)
	if err := d.Decode(v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// namedExpr is an expression of a rule or a panel, with where it is.
type namedExpr struct{ where, expr string }

// ruleExprs checks the rule file's shape and returns its expressions.
func ruleExprs(t *testing.T) (exprs []namedExpr, alerts []string) {
	t.Helper()
	var rf ruleFile
	decodeYAML(t, rulesFile, &rf)
	for _, g := range rf.Groups {
		for _, r := range g.Rules {
			where := rulesFile + ": " + r.Alert
			if r.Alert == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("%s: a rule needs alert, labels.severity and annotations.summary", where)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", where, r.For, err)
				}
			}
			exprs = append(exprs, namedExpr{where, r.Expr})
			alerts = append(alerts, r.Alert)
		}
	}
	return exprs, alerts
}

// grafanaVar is a variable reference in a panel's expression.
var grafanaVar = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?`)

// dashboardExprs checks the dashboard's shape and returns its panels'
// expressions, with their variables replaced by values PromQL takes.
func dashboardExprs(t *testing.T) []namedExpr {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	values := map[string]string{"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
	for _, v := range d.Templating.List {
		values[v.Name] = ".*"
	}
	ids := map[int]bool{}
	var exprs []namedExpr
	for _, p := range d.Panels {
		where := fmt.Sprintf("%s: panel %d %q", dashboardFile, p.ID, p.Title)
		if ids[p.ID] || p.Title == "" {
			t.Errorf("%s: a panel needs a title and an id of its own", where)
		}
		ids[p.ID] = true
		if p.GridPos.X+p.GridPos.W > 24 || p.GridPos.W <= 0 || p.GridPos.H <= 0 {
			t.Errorf("%s: gridPos %+v outside the 24 columns", where, p.GridPos)
		}
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 || p.Datasource == nil || p.Datasource.UID != "${datasource}" {
			t.Errorf("%s: a panel needs targets and the dashboard's ${datasource}", where)
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] || tg.RefID == "" {
				t.Errorf("%s: refId %q missing or repeated", where, tg.RefID)
			}
			refs[tg.RefID] = true
			expr := grafanaVar.ReplaceAllStringFunc(tg.Expr, func(s string) string {
				name := grafanaVar.FindStringSubmatch(s)[1]
				v, ok := values[name]
				if !ok {
					t.Errorf("%s: %s: variable $%s is not the dashboard's", where, tg.RefID, name)
				}
				return v
			})
			exprs = append(exprs, namedExpr{where + " " + tg.RefID, expr})
		}
	}
	if d.UID == "" || d.Title == "" || len(exprs) == 0 {
		t.Errorf("%s: want a uid, a title and panels", dashboardFile)
	}
	return exprs
}

// TestPrometheusConfig checks prometheus.yml: known fields only, every rule
// file present, jobs named once, relabelling regexes that compile.
func TestPrometheusConfig(t *testing.T) {
	var c promConfig
	decodeYAML(t, prometheusFile, &c)
	if len(c.RuleFiles) == 0 || len(c.ScrapeConfigs) == 0 {
		t.Fatalf("%s: want rule_files and scrape_configs", prometheusFile)
	}
	for _, f := range c.RuleFiles {
		if _, err := os.Stat(filepath.Join(filepath.Dir(prometheusFile), f)); err != nil {
			t.Errorf("%s: rule file: %v", prometheusFile, err)
		}
	}
	jobs := map[string]bool{}
	for _, sc := range c.ScrapeConfigs {
		if jobs[sc.JobName] || !strings.HasPrefix(sc.JobName, "flexkv") {
			t.Errorf("%s: job %q repeated, or not matched by the rules' up{job=~\"flexkv.*\"}", prometheusFile, sc.JobName)
		}
		jobs[sc.JobName] = true
		for _, rc := range sc.RelabelConfigs {
			if _, err := regexp.Compile(rc.Regex); err != nil {
				t.Errorf("%s: job %s: regex %q: %v", prometheusFile, sc.JobName, rc.Regex, err)
			}
		}
	}
}

// TestMonitoringNamesExportedSeries starts a secure local cluster, scrapes
// its metrics and checks every expression of the alert rules and the
// dashboard: it parses as PromQL, and every series and label it names is
// one the servers export.
func TestMonitoringNamesExportedSeries(t *testing.T) {
	fams := scrapeCluster(t)
	ruled, alerts := ruleExprs(t)
	for _, want := range []string{"FlexKVNoLeader", "FlexKVGroupRefusingWork", "FlexKVReplicaLag", "FlexKVCertificateExpiresSoon"} {
		if !strings.Contains(strings.Join(alerts, " "), want) {
			t.Errorf("%s: no alert %s (DESIGN 15)", rulesFile, want)
		}
	}
	for _, e := range append(ruled, dashboardExprs(t)...) {
		if err := exprProblem(e.expr, fams); err != nil {
			t.Errorf("%s: %s:\n%v", e.where, e.expr, err)
		}
	}
}

// scrapeCluster starts a local cluster of 3 groups x 3 replicas with TLS,
// checks its certificate expiry series, and returns one scrape of it.
func scrapeCluster(t *testing.T) testcluster.Families {
	t.Helper()
	cfg := testcluster.Layout(t, "flexcast", testaddr.Deploy)
	l, err := cluster.Start(cluster.Config{Cluster: cfg, Dir: t.TempDir(), NoSync: true, MetricsAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	fams := testcluster.ScrapeHTTP(t, l.MetricsAddr())
	// The alert on certificates needs a series per replica for its node
	// certificate and its CA, with years to run (flexkv cert's defaults).
	for _, g := range cfg.Groups {
		for _, r := range g.Replicas {
			for _, file := range []string{"node." + r.ID + ".crt", "ca.crt"} {
				got := fams.Series("flexkv_cert_expiry_seconds", map[string]string{"replica": r.ID, "cert": file})
				if len(got) != 1 || testcluster.Value(got[0]) < 365*86400 {
					t.Errorf("flexkv_cert_expiry_seconds{replica=%q,cert=%q} = %v, want one series over a year", r.ID, file, got)
				}
			}
		}
	}
	return fams
}
