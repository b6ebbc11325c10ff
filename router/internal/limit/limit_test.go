package limit

import (
	"math"
	"testing"
	"time"
)

func TestConns(t *testing.T) {
	c := NewConns(3, 2)
	r1, l := c.Acquire("a")
	if l != "" {
		t.Fatalf("first slot refused: %s", l)
	}
	r2, _ := c.Acquire("a")
	if r, l := c.Acquire("a"); r != nil || l != ConnectionsPerIP {
		t.Fatalf("third from one IP: release %v, limit %q; want %q", r != nil, l, ConnectionsPerIP)
	}
	r3, _ := c.Acquire("b")
	if r, l := c.Acquire("c"); r != nil || l != Connections {
		t.Fatalf("fourth in total: limit %q; want %q", l, Connections)
	}
	r1()
	r1() // a second release gives nothing back twice
	if _, l := c.Acquire("c"); l != "" {
		t.Fatalf("a released slot was not reusable: %s", l)
	}
	if r, l := c.Acquire("d"); r != nil || l != Connections {
		t.Fatalf("a double release freed two slots: limit %q", l)
	}
	r2()
	r3()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n != 1 || len(c.perIP) != 1 {
		t.Fatalf("after releases: %d held, %d addresses; want 1, 1", c.n, len(c.perIP))
	}
}

func TestConnsUnbounded(t *testing.T) {
	c := NewConns(0, 0)
	for i := range 1000 {
		if r, l := c.Acquire("a"); r == nil {
			t.Fatalf("slot %d refused by %q without bounds", i, l)
		}
	}
}

func TestPerIP(t *testing.T) {
	now := time.Unix(1000, 0)
	b := NewPerIP(2) // burst 2
	if !b.Allow("a", now) || !b.Allow("a", now) {
		t.Fatal("the burst was refused")
	}
	if b.Allow("a", now) {
		t.Fatal("a third token within the same instant was allowed")
	}
	if !b.Allow("b", now) {
		t.Fatal("another address shares the bucket")
	}
	if !b.Allow("a", now.Add(500*time.Millisecond)) {
		t.Fatal("the bucket did not refill at 2 a second")
	}
	// Idle buckets are swept once rateIdle has passed.
	b.Allow("c", now.Add(3*rateIdle))
	b.mu.Lock()
	n := len(b.rates)
	b.mu.Unlock()
	if n != 1 {
		t.Fatalf("%d buckets after the sweep, want 1", n)
	}
	if free := NewPerIP(0); !free.Allow("a", now) || len(free.rates) != 0 {
		t.Fatal("rate 0 limited or kept a bucket")
	}
	if NewPerIP(0.5).burst != 1 {
		t.Fatal("a rate under 1 has no burst of 1")
	}
}

func TestBucket(t *testing.T) {
	now := time.Unix(1000, 0)
	var d Bucket // zero: full
	for i := range 3 {
		if !d.Take(1, 3, now) {
			t.Fatalf("token %d of a full bucket of 3 refused", i)
		}
	}
	if d.Take(1, 3, now) {
		t.Fatal("an empty bucket gave a token")
	}
	if !d.Take(1, 3, now.Add(time.Second)) {
		t.Fatal("no token after a second at 1 a second")
	}
	if d.Take(1, 3, now.Add(time.Second)) {
		t.Fatal("the refill gave more than one token")
	}
	if !d.Take(1, 3, now.Add(time.Hour)) || d.tokens != 2 {
		t.Fatalf("the refill is not capped at the burst: %v tokens left", d.tokens)
	}
	var never, always Bucket
	if never.Take(-1, 10, now) {
		t.Fatal("a negative rate allowed")
	}
	for range 100 {
		if !always.Take(math.Inf(1), 0, now) {
			t.Fatal("+Inf refused")
		}
	}
}
