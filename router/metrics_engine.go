package router

// The engine's own counters (engine.Counted) as Prometheus counters,
// switchyard_engine_<name>_total, read at each scrape.

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
)

// engineCounters is a collector of an engine.Counted's counters. The
// names are taken once, when it is made; an engine returns the same ones
// at every call.
type engineCounters struct {
	c     engine.Counted
	descs []*prometheus.Desc
}

// registerEngineCounters registers the engine's counters, when it has any.
func (rt *Router) registerEngineCounters() {
	c, ok := rt.eng.(engine.Counted)
	if !ok {
		return
	}
	ec := &engineCounters{c: c}
	for _, k := range c.Counters() {
		ec.descs = append(ec.descs, prometheus.NewDesc("switchyard_engine_"+k.Name+"_total", k.Help, nil, nil))
	}
	rt.opts.Registry.MustRegister(ec)
}

func (ec *engineCounters) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range ec.descs {
		ch <- d
	}
}

func (ec *engineCounters) Collect(ch chan<- prometheus.Metric) {
	for i, k := range ec.c.Counters() {
		if i < len(ec.descs) {
			ch <- prometheus.MustNewConstMetric(ec.descs[i], prometheus.CounterValue, float64(k.Value))
		}
	}
}
