package memengine_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
)

// eventLog records what an observer is told, in order.
type eventLog struct {
	mu     sync.Mutex // guards events
	events []string
}

func (l *eventLog) Appended(r *engine.Record) {
	l.mu.Lock()
	l.events = append(l.events, "appended")
	l.mu.Unlock()
}

func (l *eventLog) TopicDeleted(string) {
	l.mu.Lock()
	l.events = append(l.events, "deleted")
	l.mu.Unlock()
}

// appendDuringDelete is an observer whose TopicDeleted appends to the
// deleted name from another goroutine (creating it again) and waits up to
// wait for that append, as an append racing the delete would.
type appendDuringDelete struct {
	e    engine.Engine
	wait time.Duration
	done chan error
}

func (a *appendDuringDelete) Appended(*engine.Record) {}

func (a *appendDuringDelete) TopicDeleted(topic string) {
	go func() {
		_, err := a.e.Append(context.Background(), engine.Message{Topic: topic, Data: []byte("1")})
		a.done <- err
	}()
	select {
	case err := <-a.done:
		a.done <- err // for the test
	case <-time.After(a.wait):
	}
}

// TestDeleteAnnouncedBeforeRecreatedRecords: every observer hears of a
// topic's deletion before any record of the topic created again under its
// name, even when an append creates it while the observers are being told.
func TestDeleteAnnouncedBeforeRecreatedRecords(t *testing.T) {
	e := newEngine(t, enginetest.Config{})
	ctx := context.Background()
	if _, err := e.Append(ctx, engine.Message{Topic: "re", Data: []byte("0")}); err != nil {
		t.Fatal(err)
	}
	// The first observer holds the announcement up for as long as the
	// racing append takes (bounded), the second records the order.
	racer := &appendDuringDelete{e: e, wait: time.Second, done: make(chan error, 1)}
	defer e.Watch(racer)()
	var log eventLog
	defer e.Watch(&log)()
	if err := e.DeleteTopic(ctx, "re"); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-racer.done:
		if err != nil {
			t.Fatalf("append after the delete: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the append after the delete never finished")
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	if len(log.events) != 2 || log.events[0] != "deleted" {
		t.Fatalf("the second observer was told %v, want [deleted appended]", log.events)
	}
}
