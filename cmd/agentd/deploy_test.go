package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentd/agentd/deploy"
)

var metricName = regexp.MustCompile(`\bagentd_[a-z0-9_]+`)

// exposedMetrics is every metric family a running agent serves at /metrics (from its # TYPE
// lines), with the type.
func exposedMetrics(t *testing.T, api string) map[string]string {
	t.Helper()
	body := fetch(t, api+"/metrics")
	out := map[string]string{}
	for _, line := range strings.Split(body, "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// exists reports whether a name used in a query is served: a family, or a histogram's
// _bucket, _sum or _count series.
func exists(families map[string]string, name string) bool {
	if _, ok := families[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && families[base] == "histogram" {
			return true
		}
	}
	return false
}

// TestDeployedRulesAndDashboardNameRealMetrics: every metric the Prometheus rules and the
// Grafana dashboard query is served by a running agent (one that has run, reported, been
// throttled and cleaned up, so every labelled series has appeared), and each file is
// well-formed: the rules as Prometheus rule groups, the dashboard as Grafana JSON.
func TestDeployedRulesAndDashboardNameRealMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns the agent")
	}
	t.Parallel()
	alerts, ruleQueries := wellFormedRules(t)
	panels, panelQueries := wellFormedDashboard(t)
	deployFilesAreTheEmbeddedOnes(t)

	s := startStatusScenario(t)
	s.cp.hold.Store(false)
	awaitKnown(t, s.api, "task/blocked", "STOPPED_ACKED", 30*time.Second)
	named := everyMetricNamedIsServed(t, s.api, append(ruleQueries, panelQueries...))
	t.Logf("%d alerts, %d dashboard panels, %d metrics named, all served", alerts, panels, named)
}

// wellFormedRules: every rule in deploy/prometheus-rules.yml has an alert, an expression, a
// severity and a summary, and the alerts the manual names are there. It returns the number
// of alerts and every query they make (annotations query metrics too).
func wellFormedRules(t *testing.T) (alerts int, queries []string) {
	t.Helper()
	var rules struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert, Expr string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(deploy.PrometheusRules, &rules); err != nil {
		t.Fatalf("deploy/prometheus-rules.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v: want alert, expr, a severity and a summary", r)
			}
			queries = append(queries, r.Expr)
			for _, a := range r.Annotations {
				queries = append(queries, a)
			}
			alerts++
		}
	}
	for _, want := range []string{"AgentdBlockedOnAckTooLong", "AgentdOutboxOld", "AgentdJournalCommitSlow", "AgentdRuntimeUnavailable"} {
		if !strings.Contains(string(deploy.PrometheusRules), "alert: "+want) {
			t.Errorf("the rules lack the alert %s", want)
		}
	}
	return alerts, queries
}

// wellFormedDashboard: deploy/grafana-dashboard.json has a uid and panels, each querying
// something. It returns the number of panels and their queries.
func wellFormedDashboard(t *testing.T) (panels int, queries []string) {
	t.Helper()
	var dash struct {
		UID    string
		Title  string
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(deploy.GrafanaDashboard, &dash); err != nil {
		t.Fatalf("deploy/grafana-dashboard.json: %v", err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("the dashboard has no uid or no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, tg := range p.Targets {
			queries = append(queries, tg.Expr)
		}
	}
	return len(dash.Panels), queries
}

// deployFilesAreTheEmbeddedOnes: the files on disk are the embedded ones (make dist copies
// the files).
func deployFilesAreTheEmbeddedOnes(t *testing.T) {
	t.Helper()
	for name, embedded := range map[string][]byte{"prometheus-rules.yml": deploy.PrometheusRules, "grafana-dashboard.json": deploy.GrafanaDashboard, "agentd.service": deploy.Unit,
		"agentd-bind-roots.conf": deploy.BindRootsDropIn} {
		onDisk, err := os.ReadFile(filepath.Join("..", "..", "deploy", name))
		if err != nil || string(onDisk) != string(embedded) {
			t.Errorf("deploy/%s differs from the embedded copy (%v)", name, err)
		}
	}
}

// everyMetricNamedIsServed: each metric the queries name (at least 10), the agent's own
// footprint (issue 25) and the label values the rules select on are served at /metrics. It
// returns how many metrics the queries name.
func everyMetricNamedIsServed(t *testing.T, api string, queries []string) int {
	t.Helper()
	families := exposedMetrics(t, api)
	var named []string
	for _, q := range queries {
		named = append(named, metricName.FindAllString(q, -1)...)
	}
	slices.Sort(named)
	named = slices.Compact(named)
	if len(named) < 10 {
		t.Fatalf("only %d metrics named: %v", len(named), named)
	}
	for _, n := range named {
		if !exists(families, n) {
			t.Errorf("%s is named by the rules or the dashboard but not served at /metrics", n)
		}
	}
	// The agent's own footprint is served beside the tasks': heap, goroutines, RSS, fds.
	for _, n := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_resident_memory_bytes", "process_open_fds"} {
		if _, ok := families[n]; !ok {
			t.Errorf("%s (the Go/process collectors) is not served at /metrics", n)
		}
	}
	metrics := scrape(t, api)
	for _, series := range []string{`agentd_source_healthy{source="runtime"}`, `agentd_source_healthy{source="exit_stream"}`,
		`agentd_source_healthy{source="credentials"}`, `agentd_source_healthy{source="core_refusals"}`, `agentd_reports_total{outcome="throttled"}`} {
		if _, ok := metrics[series]; !ok {
			t.Errorf("%s is selected by the rules but not served", series)
		}
	}
	return len(named)
}
