package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

func TestMain(m *testing.M) {
	// Token tests use lifetimes under a second; NumericDate otherwise
	// truncates exp and iat to whole seconds. Set once, before any test.
	jwt.TimePrecision = time.Millisecond
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		printAPICounts()
		os.Exit(code)
	}))
}

// waitTimeout bounds every wait in these tests; they pass in milliseconds
// and only a broken gateway reaches it.
const waitTimeout = 10 * time.Second

type gateway struct {
	t   *testing.T
	eng engine.Engine
	rt  *router.Router
	srv *httptest.Server
	reg *prometheus.Registry
}

type gwConfig struct {
	router router.Options
	engine memengine.Options
	// wrap, when set, puts a test double between the router and the
	// engine (the gateway still closes the memory engine itself).
	wrap func(engine.Engine) engine.Engine
}

func newGateway(t *testing.T, mods ...func(*gwConfig)) *gateway {
	t.Helper()
	var cfg gwConfig
	cfg.router.StatsInterval = -1
	for _, m := range mods {
		m(&cfg)
	}
	eng := memengine.New(cfg.engine)
	reg := prometheus.NewRegistry()
	cfg.router.Engine = eng
	if cfg.wrap != nil {
		cfg.router.Engine = cfg.wrap(eng)
	}
	cfg.router.Registry = reg
	rt, err := router.New(cfg.router)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPICheck(t).wrap(rt))
	g := &gateway{t: t, eng: eng, rt: rt, srv: srv, reg: reg}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
		if err := eng.Close(ctx); err != nil {
			t.Errorf("engine close: %v", err)
		}
	})
	return g
}

func (g *gateway) wsURL() string { return "ws" + strings.TrimPrefix(g.srv.URL, "http") + "/v1/ws" }

// client is a raw protocol client: it records every object the server
// sends, split on newlines.
type client struct {
	t        *testing.T
	conn     *websocket.Conn
	frames   chan map[string]any
	raw      chan []byte // every WebSocket message as received
	done     chan struct{}
	closeMu  sync.Mutex
	closeErr error
	welcome  map[string]any
	nextID   int
	backlog  []map[string]any // frames call set aside while awaiting a reply
	badMu    sync.Mutex       // guards bad
	bad      []string         // frames that do not match asyncapi.json
}

func (g *gateway) dial(t *testing.T) *client {
	t.Helper()
	c := g.dialRaw(t)
	c.welcome = c.next(t)
	if c.welcome["op"] != "welcome" {
		t.Fatalf("first frame = %v, want welcome", c.welcome)
	}
	return c
}

func (g *gateway) dialRaw(t *testing.T) *client {
	t.Helper()
	return g.dialMaybePaused(t, false)
}

// dialPaused connects without reading anything until resume: the server
// sees a client whose socket buffers fill up.
func (g *gateway) dialPaused(t *testing.T) *client {
	t.Helper()
	return g.dialMaybePaused(t, true)
}

func (c *client) resume() { go c.readLoop() }

// dialWith opens a session at the WebSocket URL followed by query (empty,
// or starting with "?") with the dial options opts, and reads it; the
// welcome is left for the caller to read and check.
func (g *gateway) dialWith(t *testing.T, query string, opts *websocket.DialOptions) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, g.wsURL()+query, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	c := &client{t: t, conn: conn, frames: make(chan map[string]any, 1<<10), raw: make(chan []byte, 1<<10), done: make(chan struct{})}
	go c.readLoop()
	t.Cleanup(func() {
		c.conn.Close(websocket.StatusNormalClosure, "")
		<-c.done
	})
	return c
}

func (g *gateway) dialMaybePaused(t *testing.T, paused bool) *client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, g.wsURL(), nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	conn.SetReadLimit(16 << 20)
	c := &client{t: t, conn: conn, frames: make(chan map[string]any, 1<<16), raw: make(chan []byte, 1<<16), done: make(chan struct{})}
	if !paused {
		go c.readLoop()
	}
	t.Cleanup(func() {
		if paused {
			c.conn.CloseNow()
		} else {
			c.conn.Close(websocket.StatusNormalClosure, "")
			<-c.done
		}
		c.badMu.Lock()
		defer c.badMu.Unlock()
		for _, b := range c.bad {
			t.Errorf("API description mismatch: %s", b)
		}
	})
	return c
}

func (c *client) readLoop() {
	defer close(c.done)
	for {
		typ, data, err := c.conn.Read(context.Background())
		if err != nil {
			c.closeMu.Lock()
			c.closeErr = err
			c.closeMu.Unlock()
			return
		}
		if typ != websocket.MessageText {
			continue
		}
		select {
		case c.raw <- data:
		default:
		}
		for _, line := range bytes.Split(data, []byte("\n")) {
			if err := checkServerFrame(line); err != nil {
				c.badMu.Lock()
				c.bad = append(c.bad, err.Error())
				c.badMu.Unlock()
			}
			var m map[string]any
			if err := json.Unmarshal(line, &m); err != nil {
				m = map[string]any{"op": "<invalid>", "raw": string(line)}
			}
			c.frames <- m
		}
	}
}

// next returns the next frame the server sent.
func (c *client) next(t *testing.T) map[string]any {
	t.Helper()
	if len(c.backlog) > 0 {
		m := c.backlog[0]
		c.backlog = c.backlog[1:]
		return m
	}
	select {
	case m := <-c.frames:
		return m
	case <-time.After(waitTimeout):
		t.Fatalf("no frame within %v", waitTimeout)
		return nil
	}
}

// nextOp returns the next frame with the given op, failing on any other
// frame except those skip allows.
func (c *client) nextOp(t *testing.T, op string) map[string]any {
	t.Helper()
	m := c.next(t)
	if m["op"] != op {
		t.Fatalf("got frame %v, want op %q", m, op)
	}
	return m
}

// noFrame asserts that nothing arrives until a round trip through the
// server completes: it sends a request with a fresh id and expects its
// reply to be the next frame.
func (c *client) noFrame(t *testing.T) {
	t.Helper()
	c.nextID++
	id := fmt.Sprintf("barrier-%d", c.nextID)
	c.send(t, map[string]any{"op": "unsubscribe", "id": id, "pattern": "barrier.never"})
	m := c.next(t)
	if m["id"] != id {
		t.Fatalf("unexpected frame %v before barrier reply", m)
	}
}

func (c *client) send(t *testing.T, v any) {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	c.sendRaw(t, websocket.MessageText, data)
}

func (c *client) sendRaw(t *testing.T, typ websocket.MessageType, data []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.conn.Write(ctx, typ, data); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// call sends op with a fresh id and returns the reply carrying that id.
// Other frames that arrive first (messages, gaps) are kept, in order, for
// the following next calls.
func (c *client) call(t *testing.T, req map[string]any) map[string]any {
	t.Helper()
	c.nextID++
	req["id"] = c.nextID
	c.send(t, req)
	var aside []map[string]any
	defer func() { c.backlog = append(c.backlog, aside...) }()
	for {
		var m map[string]any
		select {
		case m = <-c.frames:
		case <-time.After(waitTimeout):
			t.Fatalf("no reply to %v within %v", req, waitTimeout)
		}
		if id, ok := m["id"].(float64); ok && int(id) == c.nextID {
			return m
		}
		if _, ok := m["id"]; ok {
			t.Fatalf("reply for another request: %v", m)
		}
		aside = append(aside, m)
	}
}

func (c *client) mustOK(t *testing.T, req map[string]any, op string) map[string]any {
	t.Helper()
	m := c.call(t, req)
	if m["op"] != op {
		t.Fatalf("%v: got %v, want %s", req, m, op)
	}
	return m
}

func (c *client) subscribe(t *testing.T, pattern string, extra ...any) map[string]any {
	t.Helper()
	req := map[string]any{"op": "subscribe", "pattern": pattern}
	for i := 0; i+1 < len(extra); i += 2 {
		req[extra[i].(string)] = extra[i+1]
	}
	return c.mustOK(t, req, "subscribed")
}

func (c *client) publish(t *testing.T, topic string, data any, extra ...any) map[string]any {
	t.Helper()
	req := map[string]any{"op": "publish", "topic": topic, "data": data}
	for i := 0; i+1 < len(extra); i += 2 {
		req[extra[i].(string)] = extra[i+1]
	}
	return c.mustOK(t, req, "published")
}

// closeStatus waits for the connection to end and returns its close code.
func (c *client) closeStatus(t *testing.T) websocket.StatusCode {
	t.Helper()
	select {
	case <-c.done:
	case <-time.After(waitTimeout):
		t.Fatal("connection did not close")
	}
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	return websocket.CloseStatus(c.closeErr)
}

// httpDo sends a JSON request and decodes the JSON reply.
func (g *gateway) httpDo(t *testing.T, method, path string, body any) (int, map[string]any, http.Header) {
	t.Helper()
	return g.httpDoHeader(t, method, path, nil, body)
}

// httpDoHeader is httpDo with extra request headers.
func (g *gateway) httpDoHeader(t *testing.T, method, path string, h http.Header, body any) (int, map[string]any, http.Header) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, g.srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if len(data) > 0 && resp.Header.Get("Content-Type") != "" && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s %s: reply is not JSON: %s", method, path, data)
		}
	}
	return resp.StatusCode, m, resp.Header
}

func num(m map[string]any, k string) int64 {
	f, _ := m[k].(float64)
	return int64(f)
}
