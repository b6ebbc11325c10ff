package router_test

// BenchmarkIdleSubscribedSessionMemory: what an idle WebSocket session
// with one subscription holds in the whole gateway (session, queue, the
// WebSocket library's connection, the router's connection and
// subscription, the trie's entry), measured as the loadtest's idle
// scenario leaves it: subscribed, sent a message now and then, idle.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// idleTopics is the topics the idle sessions subscribe to, one each in
// turn, as the loadtest's idle scenario does.
const idleTopics = 16

// heapAfterGC returns the bytes of live heap objects after two collections
// (the second lets pooled buffers nobody holds go).
func heapAfterGC() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}

// maskedClientText is a masked text frame (mask key zero) of a short
// payload, as a client sends it.
func maskedClientText(p string) []byte {
	if len(p) > 125 {
		panic("maskedClientText: payload too long")
	}
	return append([]byte{0x81, 0x80 | byte(len(p)), 0, 0, 0, 0}, p...)
}

// idleClient is a client connection with no goroutine of its own: the
// benchmark measures the server, so the client holds as little as it can.
type idleClient struct {
	c  net.Conn
	br *bufio.Reader
}

// dialIdleClient upgrades a raw TCP connection to url's /v1/ws.
func dialIdleClient(tb testing.TB, addr string) *idleClient {
	tb.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		tb.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := "GET /v1/ws HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReaderSize(c, 512)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		tb.Fatalf("upgrade reply %d", resp.StatusCode)
	}
	return &idleClient{c: c, br: br}
}

// await reads what the server sends until it has seen want, within a
// deadline; the server's frames are unmasked, so their payloads are
// found in the bytes as they come.
func (w *idleClient) await(tb testing.TB, want string) {
	tb.Helper()
	if err := w.c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		tb.Fatal(err)
	}
	var seen []byte
	buf := make([]byte, 512)
	for !bytes.Contains(seen, []byte(want)) {
		n, err := w.br.Read(buf)
		if err != nil {
			tb.Fatalf("waiting for %q (have %q): %v", want, seen, err)
		}
		seen = append(seen, buf[:n]...)
	}
	if err := w.c.SetReadDeadline(time.Time{}); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkIdleSubscribedSessionMemory opens b.N WebSocket sessions through
// the router, each subscribed to one of 16 topics and sent one message,
// and reports the live heap each holds in the whole process (the raw
// client's connection, about 0.5 KiB, included), after two collections.
//
//	go test -run '^$' -bench BenchmarkIdleSubscribedSessionMemory -benchtime=2000x ./router/
func BenchmarkIdleSubscribedSessionMemory(b *testing.B) {
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, StatsInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			b.Errorf("shutdown: %v", err)
		}
		srv.Close()
		if err := eng.Close(ctx); err != nil {
			b.Errorf("engine close: %v", err)
		}
	}()
	addr := strings.TrimPrefix(srv.URL, "http://")
	// The topics exist before the first measurement.
	for i := range idleTopics {
		publishHTTP(b, srv.URL, fmt.Sprintf("idle.%d", i))
	}
	before := heapAfterGC()
	conns := make([]*idleClient, b.N)
	for i := range conns {
		w := dialIdleClient(b, addr)
		w.await(b, `"welcome"`)
		if _, err := w.c.Write(maskedClientText(fmt.Sprintf(`{"op":"subscribe","id":1,"pattern":"idle.%d"}`, i%idleTopics))); err != nil {
			b.Fatal(err)
		}
		w.await(b, `"subscribed"`)
		conns[i] = w
	}
	for i := range idleTopics {
		publishHTTP(b, srv.URL, fmt.Sprintf("idle.%d", i))
	}
	for _, w := range conns {
		w.await(b, `"op":"message"`)
	}
	per := float64(heapAfterGC()-before) / float64(b.N)
	b.ReportMetric(per, "heap-B/session")
	for _, w := range conns {
		_ = w.c.Close()
	}
}

// publishHTTP publishes a small record to topic through POST /v1/publish.
func publishHTTP(tb testing.TB, base, topic string) {
	tb.Helper()
	resp, err := http.Post(base+"/v1/publish", "application/json", strings.NewReader(`{"topic":"`+topic+`","data":1}`))
	if err != nil {
		tb.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		tb.Fatalf("publish to %s: status %d", topic, resp.StatusCode)
	}
}
