package router_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// scrape returns the text exposition of g's /metrics.
func (g *gateway) scrape(t *testing.T) string {
	t.Helper()
	resp, err := http.Get(g.srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var (
	docFamily   = regexp.MustCompile("(?m)^\\| `(switchyard_[a-z_]+)` \\|")
	typeComment = regexp.MustCompile(`(?m)^# TYPE (\S+) `)
)

// familiesAtStartup are the documented families that a fresh gateway
// cannot show: their labels name things that do not exist yet.
var familiesAtStartup = map[string]string{
	"switchyard_group_lag": "labelled by group, topic and partition",
	// The JetStream engine's own counters (engine.Counted); this test's
	// gateway runs on the memory engine.
	"switchyard_engine_tail_restarts_total":          "JetStream only",
	"switchyard_engine_tail_wait_give_ups_total":     "JetStream only",
	"switchyard_engine_claim_confirms_dropped_total": "JetStream only",
	"switchyard_engine_reappends_total":              "JetStream only",
	"switchyard_engine_one_at_a_time_appends_total":  "JetStream only",
}

// TestMetricsFromStartup scrapes a fresh gateway: every family in
// docs/metrics.md is there, and every label value known in advance (drop
// policies, gap reasons, error codes, transports, ...) already has its
// series at zero, so alerts can match them before the first incident.
func TestMetricsFromStartup(t *testing.T) {
	g := newGateway(t)
	text := g.scrape(t)
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	exposed := map[string]bool{}
	for _, m := range typeComment.FindAllStringSubmatch(text, -1) {
		exposed[m[1]] = true
	}
	documented := docFamily.FindAllStringSubmatch(string(doc), -1)
	if len(documented) < 20 {
		t.Fatalf("found only %d families in docs/metrics.md", len(documented))
	}
	for _, m := range documented {
		name := m[1]
		if _, later := familiesAtStartup[name]; later {
			continue
		}
		if !exposed[name] {
			t.Errorf("%s is documented but a fresh gateway does not expose it", name)
		}
	}
	// And the other way round: nothing undocumented.
	docSet := map[string]bool{}
	for _, m := range documented {
		docSet[m[1]] = true
	}
	for name := range exposed {
		if strings.HasPrefix(name, "switchyard_") && !docSet[name] {
			t.Errorf("%s is exposed but not documented in docs/metrics.md", name)
		}
	}

	for _, series := range []string{
		`switchyard_drops_total{policy="drop_old"} 0`,
		`switchyard_drops_total{policy="drop_new"} 0`,
		`switchyard_drops_total{policy="disconnect"} 0`,
		`switchyard_gaps_total{reason="queue_full"} 0`,
		`switchyard_gaps_total{reason="retention"} 0`,
		`switchyard_dead_letters_total{reason="queue_full"} 0`,
		`switchyard_dead_letters_evicted_total 0`,
		`switchyard_subscriptions{kind="plain"} 0`,
		`switchyard_subscriptions{kind="group"} 0`,
		`switchyard_subscriptions{kind="local"} 0`,
		`switchyard_publishes_total{result="ok",transport="ws"} 0`,
		`switchyard_publishes_total{result="ok",transport="http"} 0`,
		`switchyard_publishes_total{result="ok",transport="local"} 0`,
		`switchyard_publishes_total{result="backpressure",transport="http"} 0`,
		`switchyard_rejected_frames_total{code="bad_request"} 0`,
		`switchyard_rejected_frames_total{code="rate_limited"} 0`,
		`switchyard_rejected_frames_total{code="internal"} 0`,
		`switchyard_auth_failures_total{reason="expired"} 0`,
		`switchyard_forbidden_total{op="publish"} 0`,
		`switchyard_token_refreshes_total{outcome="refused"} 0`,
		`switchyard_limit_rejections_total{limit="connections"} 0`,
		`switchyard_engine_ready 1`,
	} {
		if !strings.Contains(text, "\n"+series+"\n") {
			t.Errorf("a fresh gateway lacks %s", series)
		}
	}
	if !regexp.MustCompile(`(?m)^switchyard_build_info\{version="[^"]+"\} 1$`).MatchString(text) {
		t.Error("no switchyard_build_info{version} 1")
	}
}

// TestEngineReadyMetric: switchyard_engine_ready drops to 0 once the
// gateway is shutting down (as it does when the engine stops answering).
func TestEngineReadyMetric(t *testing.T) {
	g := newGateway(t)
	if v := metricValue(t, g.reg, "switchyard_engine_ready", nil); v != 1 {
		t.Fatalf("engine_ready = %v on a working gateway", v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := g.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, g.reg, "switchyard_engine_ready", nil); v != 0 {
		t.Errorf("engine_ready = %v while shutting down", v)
	}
}

func TestHealthzVersion(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Version = "v1.2.3-test" })
	resp, err := http.Get(g.srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if body["status"] != "ok" || body["version"] != "v1.2.3-test" {
		t.Errorf("/healthz = %v", body)
	}
	if !strings.Contains(g.scrape(t), `switchyard_build_info{version="v1.2.3-test"} 1`) {
		t.Error("build_info does not carry the version")
	}
}

// TestDeadLettersEvictedMetric: switchyard_dead_letters_evicted_total is
// the engine's exact count of queue_full dead letters dropped at its cap.
func TestDeadLettersEvictedMetric(t *testing.T) {
	const limit, added = 3, 8
	g := newGateway(t, func(c *gwConfig) { c.engine.Policy.DeadLetterLimit = limit })
	if v := metricValue(t, g.reg, "switchyard_dead_letters_evicted_total", nil); v != 0 {
		t.Fatalf("evicted = %v on a fresh gateway", v)
	}
	for i := range added {
		dl := engine.DeadLetter{Reason: engine.ReasonQueueFull, Subscriber: "s",
			Record: engine.Record{Topic: "t", Offset: int64(i)}, Time: time.Now()}
		if err := g.eng.AddDeadLetter(context.Background(), dl); err != nil {
			t.Fatal(err)
		}
	}
	if v := metricValue(t, g.reg, "switchyard_dead_letters_evicted_total", nil); v != added-limit {
		t.Errorf("evicted = %v, want %d", v, added-limit)
	}
}
