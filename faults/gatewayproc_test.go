package faults

// Tests of the gateway processes (gatewayproc.go), and how the scenarios'
// tests build and watch them.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// withGatewayProcesses builds the gateway command into the test's
// temporary directory for o's gateway processes, keeps their output
// (bounded) to show if the test fails, and checks at its end that none
// outlived the run (killing any that did).
func withGatewayProcesses(t *testing.T, o *RunOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	bin, err := BuildGateway(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("gateway command built in %v", time.Since(start).Round(time.Millisecond))
	o.GatewayBinary = bin
	out := &clipLog{head: 32 << 10, tail: 32 << 10}
	o.GatewayOutput = out
	if *verbose {
		o.GatewayOutput = os.Stderr
	}
	t.Cleanup(func() {
		if n := KillProcesses(); n > 0 {
			t.Errorf("%d gateway processes outlived their cluster (killed now)", n)
		}
		if t.Failed() {
			t.Logf("the gateway processes' output:\n%s", out.String())
		}
	})
}

// clipLog keeps the first head and the last tail bytes written to it.
type clipLog struct {
	head, tail int

	mu      sync.Mutex // guards the fields below
	first   bytes.Buffer
	last    []byte // a ring of up to tail bytes once first is full
	at      int    // where the ring's next byte goes
	dropped int64  // bytes neither kept in first nor in last
}

func (c *clipLog) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(p)
	if room := c.head - c.first.Len(); room > 0 {
		k := min(room, len(p))
		c.first.Write(p[:k])
		p = p[k:]
	}
	for _, b := range p {
		if len(c.last) < c.tail {
			c.last = append(c.last, b)
			continue
		}
		if c.tail == 0 {
			c.dropped++
			continue
		}
		c.last[c.at] = b
		c.at = (c.at + 1) % c.tail
		c.dropped++
	}
	return n, nil
}

func (c *clipLog) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	b.WriteString(c.first.String())
	if c.dropped > 0 {
		fmt.Fprintf(&b, "\n[... %d bytes left out ...]\n", c.dropped)
	}
	b.Write(c.last[c.at:])
	b.Write(c.last[:c.at])
	return b.String()
}

func TestClipLog(t *testing.T) {
	c := &clipLog{head: 4, tail: 3}
	for _, s := range []string{"ab", "cdef", "gh", "ij"} {
		c.Write([]byte(s))
	}
	if got, want := c.String(), "abcd\n[... 3 bytes left out ...]\nhij"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
	c = &clipLog{head: 4, tail: 3}
	c.Write([]byte("abcde"))
	if got, want := c.String(), "abcde"; got != want {
		t.Fatalf("got %q, want %q", got, want)
	}
}

// The process's output is passed on a line at a time, named; the
// listening line (even split over writes) makes it ready once, and a race
// detector's report is noticed.
func TestLineWriter(t *testing.T) {
	var out bytes.Buffer
	ready := make(chan struct{})
	var raced atomic.Bool
	w := &lineWriter{out: &out, ready: ready, raced: &raced, name: "gateway 2"}
	for _, s := range []string{"level=WARN msg=x\nlevel=INFO msg=\"switchyard gate", "way listening\" addr=127.0.0.1:1\n",
		"level=INFO msg=\"switchyard gateway listening\" again\npartial"} {
		if raced.Load() {
			t.Fatal("raced before any report")
		}
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write: %d, %v", n, err)
		}
	}
	select {
	case <-ready:
	default:
		t.Fatal("not ready after the listening line")
	}
	want := "gateway 2: level=WARN msg=x\ngateway 2: level=INFO msg=\"switchyard gateway listening\" addr=127.0.0.1:1\n" +
		"gateway 2: level=INFO msg=\"switchyard gateway listening\" again\n"
	if out.String() != want {
		t.Fatalf("output:\n%s\nwant:\n%s", out.String(), want)
	}
	w.Write([]byte(" line\n==================\nWARNING: DATA RACE\n"))
	if !raced.Load() {
		t.Fatal("a race report not noticed")
	}
}
