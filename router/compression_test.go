package router_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
)

// dialCompressed opens a raw WebSocket that offers permessage-deflate
// without context takeover; it returns the connection and the extensions
// the gateway accepted.
func dialCompressed(t *testing.T, g *gateway) (*websocket.Conn, string) {
	t.Helper()
	conn, ext, _ := dialCompressedCounting(t, g)
	return conn, ext
}

// countingConn counts the bytes written to it.
type countingConn struct {
	net.Conn
	written atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// dialCompressedCounting is dialCompressed that also counts what the
// client writes to the socket, the handshake included.
func dialCompressedCounting(t *testing.T, g *gateway) (*websocket.Conn, string, *countingConn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	var counted *countingConn
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		counted = &countingConn{Conn: c}
		return counted, nil
	}}}
	conn, resp, err := websocket.Dial(ctx, g.wsURL(), &websocket.DialOptions{CompressionMode: websocket.CompressionNoContextTakeover, HTTPClient: hc})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { conn.CloseNow() })
	conn.SetReadLimit(16 << 20)
	return conn, resp.Header.Get("Sec-WebSocket-Extensions"), counted
}

func readOp(t *testing.T, conn *websocket.Conn, op string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, `{"op":"`+op+`"`) {
				return line
			}
		}
	}
}

func TestCompressionNegotiation(t *testing.T) {
	for _, tc := range []struct {
		name string
		on   bool
	}{{"off", false}, {"on", true}} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) { c.router.Compression = tc.on })
			conn, ext := dialCompressed(t, g)
			negotiated := strings.Contains(ext, "permessage-deflate")
			if negotiated != tc.on {
				t.Fatalf("Sec-WebSocket-Extensions %q with compression %v", ext, tc.on)
			}
			if tc.on && (!strings.Contains(ext, "server_no_context_takeover") || !strings.Contains(ext, "client_no_context_takeover")) {
				t.Fatalf("context takeover negotiated: %q", ext)
			}
			readOp(t, conn, "welcome")
			ctx := context.Background()
			big := `{"op":"subscribe","id":1,"pattern":"big"}`
			if err := conn.Write(ctx, websocket.MessageText, []byte(big)); err != nil {
				t.Fatal(err)
			}
			readOp(t, conn, "subscribed")
			// Both directions carry frames over the threshold.
			pub := `{"op":"publish","id":2,"topic":"big","data":"` + strings.Repeat("abcdefgh", 2048) + `"}`
			if err := conn.Write(ctx, websocket.MessageText, []byte(pub)); err != nil {
				t.Fatal(err)
			}
			if m := readOp(t, conn, "message"); !strings.Contains(m, strings.Repeat("abcdefgh", 2048)) {
				t.Fatalf("message lost its data: %.80s", m)
			}
		})
	}
}

// TestCompressionInflateLimit: a compressed frame far smaller than the
// read limit that inflates past it closes the session with 1009.
func TestCompressionInflateLimit(t *testing.T) {
	const limit = 4096
	g := newGateway(t, func(c *gwConfig) {
		c.router.Compression = true
		c.router.Session.ReadLimit = limit
	})
	conn, ext, counted := dialCompressedCounting(t, g)
	if !strings.Contains(ext, "permessage-deflate") {
		t.Fatalf("not negotiated: %q", ext)
	}
	readOp(t, conn, "welcome")
	before := counted.written.Load()
	// 64 KiB of one repeated byte deflates to well under 1 KiB.
	bomb := `{"op":"publish","topic":"x","data":"` + strings.Repeat("a", 64<<10) + `"}`
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := conn.Write(ctx, websocket.MessageText, []byte(bomb)); err != nil {
		t.Fatal(err)
	}
	if sent := counted.written.Load() - before; sent >= limit {
		t.Fatalf("the frame took %d bytes on the wire: not compressed under the limit", sent)
	}
	for {
		_, _, err := conn.Read(ctx)
		if err == nil {
			continue
		}
		if s := websocket.CloseStatus(err); s != websocket.StatusMessageTooBig {
			t.Fatalf("closed with %v (%v), want 1009", s, err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatal(err)
		}
		return
	}
}
