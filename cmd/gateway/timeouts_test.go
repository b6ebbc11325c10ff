package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestTrickledBodyClosed: a client that sends its request headers and then
// trickles the body one byte at a time is disconnected once --read-timeout
// has passed since the request began, and the timeout is counted.
func TestTrickledBodyClosed(t *testing.T) {
	const timeout = time.Second
	addr := runGateway(t, "--read-timeout", timeout.String())
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	if _, err := io.WriteString(conn, "POST /v1/publish HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { // owned by this test: ends on stop, a write error or after 50 bytes
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 50; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := conn.Write([]byte{' '}); err != nil {
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	// Bound the test's own wait well above the server's timeout.
	_ = conn.SetReadDeadline(time.Now().Add(8 * time.Second))
	_, err = io.ReadAll(conn) // a reply and the server's close, or the close alone
	elapsed := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("still connected after %v", elapsed)
	}
	if elapsed < timeout-100*time.Millisecond {
		t.Fatalf("closed after %v, before the %v timeout", elapsed, timeout)
	}
	if n := metricValue(t, addr, `switchyard_http_timeouts_total{phase="read"}`); n < 1 {
		t.Fatalf("read timeouts counted: %v, want at least 1", n)
	}
}

// metricValue scrapes one sample from the gateway's /metrics; 0 when the
// series is absent.
func metricValue(t *testing.T, addr, series string) float64 {
	t.Helper()
	return scrapeMetric(t, http.Get, "http://"+addr+"/metrics", series)
}

// scrapeMetric gets the metrics page at url with get and returns the
// value of series; 0 when the series is absent.
func scrapeMetric(t *testing.T, get func(url string) (*http.Response, error), url, series string) float64 {
	t.Helper()
	resp, err := get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return 0
}

// TestTimeoutsSpareWebSocketsAndPolls: with read and write timeouts far
// shorter than the waits, a WebSocket session outlives both (an upgraded
// connection has no deadlines) and a long poll keeps its wait_ms.
func TestTimeoutsSpareWebSocketsAndPolls(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr := runGateway(t, "--read-timeout", timeout.String(), "--write-timeout", timeout.String())

	t.Run("websocket outlives the write timeout", func(t *testing.T) {
		w := dialNode(t, &node{addr: addr})
		w.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "quiet"})
		w.expect(t, "subscribed")
		// Stay silent past both timeouts, then use the session both ways.
		<-time.After(4 * timeout)
		w.send(t, map[string]any{"op": "publish", "id": 2, "topic": "quiet", "data": 1})
		got := map[any]bool{}
		for range 2 {
			got[w.next(t)["op"]] = true
		}
		if !got["published"] || !got["message"] {
			t.Fatalf("got ops %v, want published and message", got)
		}
	})

	t.Run("long poll keeps wait_ms", func(t *testing.T) {
		const wait = 4 * timeout
		code, m, took := httpJSON(t, "POST", "http://"+addr+"/v1/groups/slow/poll",
			fmt.Sprintf(`{"pattern":"nothing.here","wait_ms":%d}`, wait.Milliseconds()))
		if code != http.StatusOK || m["records"] == nil {
			t.Fatalf("poll: %d %v", code, m)
		}
		if took < wait-50*time.Millisecond {
			t.Fatalf("poll answered after %v, before its wait_ms of %v", took, wait)
		}
	})
	if n := metricValue(t, addr, `switchyard_http_timeouts_total{phase="write"}`); n != 0 {
		t.Fatalf("write timeouts counted: %v, want 0", n)
	}
}

// TestSSEOutlivesReadTimeout: an SSE stream is a long response to a
// request without a body; the server's read timeout (which net/http's
// background read would hit, canceling the request) must not end it.
func TestSSEOutlivesReadTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	addr := runGateway(t, "--read-timeout", timeout.String(), "--write-timeout", timeout.String())
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/v1/sse?pattern=sse.t", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("sse: %d", resp.StatusCode)
	}
	lines := make(chan string, 64)
	go func() { // ends when the body closes (the deferred Close or cancel)
		defer close(lines)
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	<-time.After(4 * timeout)
	if code, m, _ := httpJSON(t, "POST", "http://"+addr+"/v1/publish", `{"topic":"sse.t","data":42}`); code != 200 {
		t.Fatalf("publish: %d %v", code, m)
	}
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the stream ended before the record arrived")
			}
			if strings.HasPrefix(l, "data:") && strings.Contains(l, `"data":42`) {
				return
			}
		case <-ctx.Done():
			t.Fatal("no record on the stream")
		}
	}
}
