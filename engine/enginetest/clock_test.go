package enginetest

import (
	"slices"
	"sync"
	"testing"
	"time"
)

func TestFakeClock(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewFakeClock(start)
	var mu sync.Mutex
	var fired []string
	record := func(name string) func() {
		return func() {
			mu.Lock()
			fired = append(fired, name+"@"+c.Now().Sub(start).String())
			mu.Unlock()
		}
	}
	c.AfterFunc(3*time.Second, record("c"))
	c.AfterFunc(time.Second, record("a"))
	stopped := c.AfterFunc(2*time.Second, record("stopped"))
	c.AfterFunc(time.Second, func() {
		record("b")()
		c.AfterFunc(time.Second, record("nested")) // due at 2s, within this Advance
	})
	if !stopped.Stop() || stopped.Stop() {
		t.Errorf("Stop: want true once, then false")
	}
	if c.Pending() != 3 {
		t.Fatalf("Pending = %d, want 3", c.Pending())
	}
	c.Advance(2500 * time.Millisecond)
	want := []string{"a@1s", "b@1s", "nested@2s"}
	if !slices.Equal(fired, want) {
		t.Errorf("fired %v, want %v", fired, want)
	}
	if got := c.Now().Sub(start); got != 2500*time.Millisecond {
		t.Errorf("Now = start+%v, want start+2.5s", got)
	}
	c.Advance(time.Second)
	if want = append(want, "c@3s"); !slices.Equal(fired, want) {
		t.Errorf("fired %v, want %v", fired, want)
	}
	if c.Pending() != 0 {
		t.Errorf("Pending = %d after everything fired", c.Pending())
	}
}

func TestFakeClockWaitForTimers(t *testing.T) {
	c := NewFakeClock(time.Unix(0, 0))
	if c.WaitForTimers(1, 10*time.Millisecond) {
		t.Fatal("WaitForTimers reported a timer that does not exist")
	}
	done := make(chan bool, 1)
	go func() { done <- c.WaitForTimers(2, 5*time.Second) }()
	c.AfterFunc(time.Hour, func() {})
	c.AfterFunc(time.Hour, func() {})
	if !waitFor(t, done, 5*time.Second, "WaitForTimers") {
		t.Fatal("WaitForTimers timed out with two timers pending")
	}
}

func TestSafeName(t *testing.T) {
	if got := safeName("TestX/Groups/a b.c"); got != "TestX_Groups_a_b_c" {
		t.Errorf("safeName = %q", got)
	}
}
