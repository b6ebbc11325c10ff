package router_test

import (
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// countedEngine is an engine with counters of its own.
type countedEngine struct {
	engine.Engine
	restarts atomic.Int64
}

func (c *countedEngine) Counters() []engine.Counter {
	return []engine.Counter{{Name: "tail_restarts", Help: "Times the tail started again.", Value: c.restarts.Load()}}
}

// TestEngineCountersAreMetrics: an engine's own counters
// (engine.Counted) are published as switchyard_engine_<name>_total, read
// at each scrape.
func TestEngineCountersAreMetrics(t *testing.T) {
	ce := &countedEngine{}
	g := newGateway(t, func(c *gwConfig) { c.wrap = func(e engine.Engine) engine.Engine { ce.Engine = e; return ce } })
	ce.restarts.Store(3)
	body := g.scrape(t)
	if !strings.Contains(body, "# TYPE switchyard_engine_tail_restarts_total counter") ||
		!strings.Contains(body, "switchyard_engine_tail_restarts_total 3") {
		t.Fatalf("metrics lack switchyard_engine_tail_restarts_total 3")
	}
	ce.restarts.Store(4)
	if body := g.scrape(t); !strings.Contains(body, "switchyard_engine_tail_restarts_total 4") {
		t.Fatalf("the counter was not read again at the scrape")
	}
}

// TestJetStreamCountersAreDocumentedMetrics: a gateway on JetStream
// exposes every switchyard_engine_ family docs/metrics.md lists, and no
// other.
func TestJetStreamCountersAreDocumentedMetrics(t *testing.T) {
	url := natstest.URL(t)
	g := newJSGateway(t, url, natstest.Prefix(t, url))
	text := g.scrape(t)
	doc, err := os.ReadFile("../docs/metrics.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range docFamily.FindAllStringSubmatch(string(doc), -1) {
		if strings.HasPrefix(m[1], "switchyard_engine_") && strings.HasSuffix(m[1], "_total") {
			documented[m[1]] = true
		}
	}
	exposed := map[string]bool{}
	for _, m := range typeComment.FindAllStringSubmatch(text, -1) {
		if strings.HasPrefix(m[1], "switchyard_engine_") && strings.HasSuffix(m[1], "_total") {
			exposed[m[1]] = true
		}
	}
	if len(exposed) == 0 || len(exposed) != len(documented) {
		t.Fatalf("engine counters exposed %v, documented %v", exposed, documented)
	}
	for name := range exposed {
		if !documented[name] {
			t.Errorf("%s is exposed but not documented", name)
		}
	}
}
