package client_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeGateway is a WebSocket server whose every connection a test scripts,
// for sequences a real gateway does not produce on demand (a connection
// lost right after a particular request).
type fakeGateway struct {
	URL string

	srv    *httptest.Server
	ctx    context.Context // ends with the test
	cancel context.CancelFunc
	wg     sync.WaitGroup // running scripts
	mu     sync.Mutex     // guards n
	n      int            // connections accepted
}

// fakeConn is one scripted connection.
type fakeConn struct {
	t    *testing.T
	ctx  context.Context
	conn *websocket.Conn
}

// newFakeGateway starts a server that runs script for every connection,
// numbered from 1; the connection is closed when script returns. The
// test's cleanup ends every script (ctx is done) and waits for them.
func newFakeGateway(t *testing.T, script func(n int, fc *fakeConn)) *fakeGateway {
	t.Helper()
	g := &fakeGateway{}
	g.ctx, g.cancel = context.WithCancel(context.Background())
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		g.mu.Lock()
		g.n++
		n := g.n
		g.mu.Unlock()
		g.wg.Add(1)
		defer g.wg.Done()
		defer conn.CloseNow()
		script(n, &fakeConn{t: t, ctx: g.ctx, conn: conn})
	}))
	g.URL = "ws" + strings.TrimPrefix(g.srv.URL, "http") + "/v1/ws"
	t.Cleanup(func() {
		g.cancel()
		g.srv.CloseClientConnections()
		g.srv.Close()
		g.wg.Wait()
	})
	return g
}

// send writes frame as JSON; it reports false when the connection is gone.
func (fc *fakeConn) send(frame map[string]any) bool {
	b, err := json.Marshal(frame)
	if err != nil {
		fc.t.Errorf("encoding %v: %v", frame, err)
		return false
	}
	return fc.conn.Write(fc.ctx, websocket.MessageText, b) == nil
}

// welcome sends a welcome of the given epoch.
func (fc *fakeConn) welcome(epoch string) bool {
	return fc.send(map[string]any{"op": "welcome", "session": fmt.Sprintf("s-%p", fc), "epoch": epoch,
		"limits": map[string]any{"max_frame_bytes": 1 << 20, "queue_messages": 1024}})
}

// request reads the client's next request, or nil when the connection is
// gone.
func (fc *fakeConn) request() map[string]any {
	_, b, err := fc.conn.Read(fc.ctx)
	if err != nil {
		return nil
	}
	var f map[string]any
	if err := json.Unmarshal(b, &f); err != nil {
		fc.t.Errorf("client sent %q: %v", b, err)
		return nil
	}
	return f
}

// message sends a plain delivery of topic (partition 0) at offset.
func (fc *fakeConn) message(pattern, topic string, offset int64, data any) bool {
	return fc.send(map[string]any{"op": "message", "pattern": pattern, "topic": topic, "partition": 0,
		"offset": offset, "data": data, "time": time.Now().UTC().Format(time.RFC3339Nano)})
}

// hold keeps the connection open until the test ends or the client closes
// it, reading (and discarding) what the client sends.
func (fc *fakeConn) hold() {
	for fc.request() != nil {
	}
}
