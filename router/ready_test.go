package router_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// mutedTail is an engine whose live tail stops announcing appends once
// muted: appends still succeed, fan-out has silently stopped.
type mutedTail struct {
	engine.Engine
	muted atomic.Bool
}

func (e *mutedTail) Watch(o engine.Observer) func() { return e.Engine.Watch(mutedShim{o, e}) }

type mutedShim struct {
	engine.Observer
	e *mutedTail
}

func (s mutedShim) Appended(r *engine.Record) {
	if !s.e.muted.Load() {
		s.Observer.Appended(r)
	}
}

// TestReadyMeansDelivery: /readyz is 200 while a probe record is appended
// and announced back, and 503 unavailable, within its 2 s bound, once the
// tail stops announcing though appends still succeed; probe records never
// reach subscribers of $sys.#.
func TestReadyMeansDelivery(t *testing.T) {
	mt := &mutedTail{}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { mt.Engine = e; return mt }
	})
	sys := g.dial(t)
	sys.subscribe(t, "$sys.#")
	if st, body, _ := g.httpDo(t, http.MethodGet, "/readyz", nil); st != http.StatusOK {
		t.Fatalf("readyz: %d %v", st, body)
	}
	if _, err := g.eng.Topic(context.Background(), "$sys.ready"); err != nil {
		t.Fatalf("the probe's topic: %v", err)
	}
	sys.noFrame(t)

	mt.muted.Store(true)
	// The last result answers for up to 2 s; then a probe finds the tail
	// silent.
	var body map[string]any
	deadline := time.Now().Add(waitTimeout)
	for {
		start := time.Now()
		st, b, _ := g.httpDo(t, http.MethodGet, "/readyz", nil)
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("readyz took %v", took)
		}
		if st == http.StatusServiceUnavailable {
			body = b
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("readyz stayed 200 with the tail silent")
		}
		time.Sleep(100 * time.Millisecond) // the cached result's age: no event to wait on
	}
	if body["code"] != "unavailable" {
		t.Fatalf("readyz with the tail silent: %v", body)
	}
	if got := metricValue(t, g.reg, "switchyard_engine_ready", nil); got != 0 {
		t.Errorf("switchyard_engine_ready = %v after a failed probe, want 0", got)
	}
	mt.muted.Store(false)
	waitUntil(t, "readyz is 200 again", func() bool {
		st, _, _ := g.httpDo(t, http.MethodGet, "/readyz", nil)
		return st == http.StatusOK
	})
}

// probeAppends is a mutedTail that tells when a readiness probe record
// has been appended.
type probeAppends struct {
	mutedTail
	appended chan struct{}
}

func (e *probeAppends) Append(ctx context.Context, m engine.Message) (engine.Appended, error) {
	a, err := e.mutedTail.Append(ctx, m)
	if m.Topic == "$sys.ready" {
		select {
		case e.appended <- struct{}{}:
		default:
		}
	}
	return a, err
}

// TestReadyDuringShutdownAnswersShuttingDown: a readiness probe waiting
// for its record's announcement when Shutdown begins (the tail stops with
// it) answers shutting_down at once, not unavailable ("fan-out has
// stopped") at the end of its timeout.
func TestReadyDuringShutdownAnswersShuttingDown(t *testing.T) {
	pa := &probeAppends{appended: make(chan struct{}, 1)}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { pa.Engine = e; return pa }
	})
	pa.muted.Store(true) // the probe's record is never announced
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ready := make(chan error, 1)
	go func() { ready <- g.rt.Ready(ctx) }()
	select {
	case <-pa.appended:
	case <-ctx.Done():
		t.Fatal("no probe record was appended")
	}
	if err := g.rt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	select {
	case err := <-ready:
		if err == nil || !strings.Contains(err.Error(), "shutting") {
			t.Fatalf("Ready during shutdown: %v, want shutting_down", err)
		}
	case <-ctx.Done():
		t.Fatal("Ready still waits for its probe after Shutdown returned")
	}
}
