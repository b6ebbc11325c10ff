package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/switchyard/switchyard/client"
)

var (
	metricName = regexp.MustCompile(`\bswitchyard_[a-z_]+`)
	typeLine   = regexp.MustCompile(`(?m)^# TYPE (\S+) (\S+)`)
	docMetric  = regexp.MustCompile("(?m)^\\| `(switchyard_[a-z_]+)` \\|")
)

// opsGateway runs the gateway binary's run loop with one consumer group
// in it (so that switchyard_group_lag has series) and returns the metric
// families of its /metrics, by name, with their types.
func opsGateway(t *testing.T) map[string]string {
	t.Helper()
	base := "http://" + runGateway(t, "--stats-interval", "20ms")

	cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer ccancel()
	c, err := client.Dial(cctx, base, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Publish(cctx, "ops.orders", map[string]int{"n": 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Subscribe(cctx, "ops.#", client.SubscribeOptions{Group: "ops"}, func(*client.Message) {}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(base + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(b), "\nswitchyard_group_lag{") {
			families := map[string]string{}
			for _, m := range typeLine.FindAllStringSubmatch(string(b), -1) {
				families[m[1]] = m[2]
			}
			return families
		}
		if time.Now().After(deadline) {
			t.Fatalf("no switchyard_group_lag series with a group present:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// checkNames checks that every switchyard_ metric expr names is documented
// in docs/metrics.md and exposed by the gateway (a histogram's _bucket,
// _sum and _count series count as its family), and returns the families.
func checkNames(t *testing.T, where, expr string, families map[string]string, documented map[string]bool) []string {
	t.Helper()
	var out []string
	for _, name := range metricName.FindAllString(expr, -1) {
		family := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base := strings.TrimSuffix(name, suffix); base != name && families[base] == "histogram" {
				family = base
			}
		}
		if _, ok := families[family]; !ok {
			t.Errorf("%s: %s is not exposed by the gateway", where, name)
		}
		if !documented[family] {
			t.Errorf("%s: %s is not documented in docs/metrics.md", where, family)
		}
		out = append(out, family)
	}
	if strings.Count(expr, "(") != strings.Count(expr, ")") || strings.Count(expr, "{") != strings.Count(expr, "}") {
		t.Errorf("%s: unbalanced brackets in %q", where, expr)
	}
	return out
}

func documentedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	doc, err := os.ReadFile("../../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, m := range docMetric.FindAllStringSubmatch(string(doc), -1) {
		out[m[1]] = true
	}
	return out
}

// TestAlertRules checks deploy/prometheus/alerts.yml: every rule has a
// name, an expression and a summary, every metric an expression names
// exists on a gateway, and the rules cover slow consumers, dead letters,
// group lag and an unavailable NATS.
func TestAlertRules(t *testing.T) {
	families := opsGateway(t)
	documented := documentedMetrics(t)
	data, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
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
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	used := map[string]bool{}
	n := 0
	for _, g := range doc.Groups {
		for _, r := range g.Rules {
			n++
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" || r.Labels["severity"] == "" {
				t.Errorf("rule %+v lacks alert, expr, severity or summary", r)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("%s: for %q: %v", r.Alert, r.For, err)
				}
			}
			for _, f := range checkNames(t, r.Alert, r.Expr, families, documented) {
				used[f] = true
			}
		}
	}
	if n == 0 {
		t.Fatal("no rules")
	}
	for concern, metric := range map[string]string{
		"slow consumers":   "switchyard_slow_consumer_disconnects_total",
		"dropped messages": "switchyard_drops_total",
		"dead letters":     "switchyard_dead_letters_stored",
		"group lag":        "switchyard_group_lag",
		"NATS unavailable": "switchyard_engine_ready",
	} {
		if !used[metric] {
			t.Errorf("no alert on %s (%s)", concern, metric)
		}
	}
}

// TestDashboard checks deploy/grafana/switchyard.json: valid JSON, panels
// that query the data source variable (a Prometheus is provisioned), and
// only metrics a gateway exposes.
func TestDashboard(t *testing.T) {
	families := opsGateway(t)
	documented := documentedMetrics(t)
	data, err := os.ReadFile("../../deploy/grafana/switchyard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatalf("switchyard.json: %v", err)
	}
	ds, err := os.ReadFile("../../deploy/grafana/provisioning/datasources/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || dash.Title == "" || len(dash.Panels) < 10 {
		t.Fatalf("dashboard uid %q title %q with %d panels", dash.UID, dash.Title, len(dash.Panels))
	}
	ids := map[int]bool{}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d repeats", p.ID)
		}
		ids[p.ID] = true
		// The data source is the dashboard's variable (TestGrafanaDashboard),
		// which offers the provisioned Prometheus.
		if p.Datasource.UID != "${datasource}" || !strings.Contains(string(ds), "type: prometheus") {
			t.Errorf("panel %q uses data source %q, not ${datasource} of the provisioned Prometheus", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, f := range checkNames(t, p.Title, tg.Expr, families, documented) {
				used[f] = true
			}
		}
	}
	var unused []string
	for _, must := range []string{"switchyard_connections", "switchyard_publishes_total", "switchyard_deliveries_total",
		"switchyard_drops_total", "switchyard_group_lag", "switchyard_dead_letters_stored", "switchyard_engine_ready", "switchyard_append_seconds"} {
		if !used[must] {
			unused = append(unused, must)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("the dashboard does not show %v", unused)
	}
}

// TestAlertJobLabel: the rule on up{} matches the job of every way the
// deploy files scrape the gateway: the compose Prometheus's job_name and
// the Helm chart's ServiceMonitor, whose job is its Service's name (the
// chart's fullname: the release name when it holds "switchyard", else
// "<release>-switchyard").
func TestAlertJobLabel(t *testing.T) {
	data, err := os.ReadFile("../../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`up\{job(=~|=)"([^"]*)"\}`).FindStringSubmatch(string(data))
	if m == nil {
		t.Fatal("no rule on up{job…}")
	}
	match := func(job string) bool { return job == m[2] }
	if m[1] == "=~" {
		re := regexp.MustCompile("^(?:" + m[2] + ")$") // Prometheus anchors its regexes
		match = re.MatchString
	}
	prom, err := os.ReadFile("../../deploy/prometheus/prometheus.yml")
	if err != nil {
		t.Fatal(err)
	}
	jobs := []string{"switchyard-prod", "gw-switchyard", "my-release-switchyard"}
	for _, jm := range regexp.MustCompile(`job_name: *(\S+)`).FindAllStringSubmatch(string(prom), -1) {
		jobs = append(jobs, jm[1])
	}
	for _, job := range jobs {
		if !match(job) {
			t.Errorf("up{job%s%q} does not match the job %q", m[1], m[2], job)
		}
	}
}
