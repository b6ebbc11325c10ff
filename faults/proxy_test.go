package faults

import (
	"bufio"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// An embedded NATS server (nats-server 2.15) can leave a stream's
		// file store running after Shutdown and WaitForShutdown have
		// returned: its flush loop, and the access-time service the store
		// registered. Seen once in four whole runs of this package under
		// -race, every test passing; the harness's own goroutines, and
		// every other of the servers', are still checked.
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server/ats.Register.func1"),
	)
}

// echoServer echoes every line it reads; it stops with the test.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	conns := make(chan net.Conn, 64)
	go func() { // exits when the listener closes
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns <- c
			go func() { _, _ = io.Copy(c, c) }() // exits when c closes
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		close(conns)
		for c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

func newProxy(t *testing.T, target string) *Proxy {
	t.Helper()
	p, err := NewProxy("test", target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip sends line and returns how long its echo took, or an error
// if none came within d.
func roundTrip(c net.Conn, r *bufio.Reader, line string, d time.Duration) (time.Duration, error) {
	start := time.Now()
	_ = c.SetDeadline(start.Add(d))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return 0, err
	}
	got, err := r.ReadString('\n')
	if err != nil {
		return 0, err
	}
	if got != line+"\n" {
		return 0, errors.New("echo " + got)
	}
	return time.Since(start), nil
}

func TestProxyForwards(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	for _, s := range []string{"a", "bb", "ccc"} {
		if _, err := roundTrip(c, r, s, 5*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if p.Conns() != 1 {
		t.Fatalf("conns %d", p.Conns())
	}
}

// A cut in either direction holds bytes (no echo, no error) until healed,
// then delivers them in order; a connection made while cut hears nothing.
func TestProxyCutAndHeal(t *testing.T) {
	for _, d := range []Dir{Up, Down} {
		t.Run(d.String(), func(t *testing.T) {
			p := newProxy(t, echoServer(t))
			c, r := dial(t, p.Addr())
			if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			p.Cut(d)
			if _, err := roundTrip(c, r, "held", 300*time.Millisecond); !isTimeout(err) {
				t.Fatalf("while cut %s: %v, want a timeout", d, err)
			}
			c2, r2 := dial(t, p.Addr())
			if _, err := roundTrip(c2, r2, "new", 300*time.Millisecond); !isTimeout(err) {
				t.Fatalf("new connection while cut %s: %v, want a timeout", d, err)
			}
			p.Heal()
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if got, err := r.ReadString('\n'); err != nil || got != "held\n" {
				t.Fatalf("after heal: %q %v", got, err)
			}
			if _, err := roundTrip(c, r, "after", 5*time.Second); err != nil {
				t.Fatal(err)
			}
			_ = c2.SetReadDeadline(time.Now().Add(5 * time.Second))
			if got, err := r2.ReadString('\n'); err != nil || got != "new\n" {
				t.Fatalf("new connection after heal: %q %v", got, err)
			}
		})
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// Latency delays each direction by its setting; a round trip through both
// takes at least the sum.
func TestProxyLatency(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	p.Set(Up, Faults{Latency: 100 * time.Millisecond})
	p.Set(Down, Faults{Latency: 50 * time.Millisecond})
	took, err := roundTrip(c, r, "slow", 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if took < 150*time.Millisecond {
		t.Fatalf("round trip %v, want >= 150ms", took)
	}
	// Chunks in flight do not queue behind each other's delay: ten lines
	// sent at once all arrive about one round trip later.
	start := time.Now()
	for range 10 {
		if _, err := c.Write([]byte("x\n")); err != nil {
			t.Fatal(err)
		}
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for range 10 {
		if _, err := r.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took > 10*150*time.Millisecond/2 {
		t.Fatalf("ten pipelined lines took %v: latency serialised", took)
	}
	p.Heal()
	if _, err := roundTrip(c, r, "fast", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Drop 1 resets the connection on its first chunk; Drop 0 forwards all.
func TestProxyDropResets(t *testing.T) {
	p := newProxy(t, echoServer(t))
	p.Set(Up, Faults{Drop: 1})
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "lost", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("drop 1: %v, want a reset", err)
	}
	if p.Resets() != 1 {
		t.Fatalf("resets %d", p.Resets())
	}
	p.Heal()
	c2, r2 := dial(t, p.Addr())
	if _, err := roundTrip(c2, r2, "kept", 5*time.Second); err != nil {
		t.Fatal(err)
	}
}

// Reset closes every open connection with an error on the client.
func TestProxyReset(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "a", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	p.Reset()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.ReadString('\n'); err == nil || isTimeout(err) {
		t.Fatalf("after reset: %v, want the connection closed", err)
	}
	if p.Conns() != 0 {
		t.Fatalf("conns %d after reset", p.Conns())
	}
}

// A target that is down refuses the client's connection at once.
func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	p := newProxy(t, addr)
	c, err := net.Dial("tcp", p.Addr())
	if err != nil {
		return // reset before the dial returned
	}
	defer c.Close()
	r := bufio.NewReader(c)
	if _, err := roundTrip(c, r, "x", 5*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("target down: %v, want the connection closed", err)
	}
}

// Silence makes the connections open now go silent for good (no echo, no
// error, no end passed on), while a connection made after it forwards.
func TestProxySilence(t *testing.T) {
	p := newProxy(t, echoServer(t))
	c, r := dial(t, p.Addr())
	if _, err := roundTrip(c, r, "before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := p.Silence(); n != 1 {
		t.Fatalf("Silence silenced %d connections, want 1", n)
	}
	if _, err := roundTrip(c, r, "lost", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("silenced: %v, want a timeout", err)
	}
	c2, r2 := dial(t, p.Addr())
	if _, err := roundTrip(c2, r2, "new", 5*time.Second); err != nil {
		t.Fatalf("a connection made after Silence: %v", err)
	}
	p.Heal() // Silence is for good: healing does not bring the link back
	if _, err := roundTrip(c, r, "still lost", 300*time.Millisecond); !isTimeout(err) {
		t.Fatalf("silenced after Heal: %v, want a timeout", err)
	}
}
