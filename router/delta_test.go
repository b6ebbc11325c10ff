package router_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/centrifugal/fdelta"

	"github.com/switchyard/switchyard/session"
)

// dashboardState is a 2 KiB JSON object of which version v changes a few
// fields.
func dashboardState(v int) map[string]any {
	m := map[string]any{"version": v, "cpu": v % 97, "status": fmt.Sprintf("ok-%d", v%5)}
	for i := range 40 {
		m[fmt.Sprintf("gauge_%02d", i)] = strings.Repeat("x", 30) + fmt.Sprint(i)
	}
	return m
}

// deltaReader rebuilds the payloads of a delta subscription's messages,
// per (topic, partition), the way a client does.
type deltaReader struct {
	last   map[string][]byte
	deltas int
	fulls  int
}

// take returns the payload of message m, failing t when m is a delta
// without a base or one that does not apply.
func (r *deltaReader) take(t *testing.T, m map[string]any) []byte {
	t.Helper()
	if r.last == nil {
		r.last = map[string][]byte{}
	}
	k := fmt.Sprintf("%v/%v", m["topic"], m["partition"])
	if m["op"] == "gap" {
		delete(r.last, k)
		return nil
	}
	if m["op"] != "message" {
		t.Fatalf("frame %v, want a message", m)
	}
	var payload []byte
	if m["delta"] == true {
		r.deltas++
		base, ok := r.last[k]
		if !ok {
			t.Fatalf("delta message at offset %v without a base: %v", m["offset"], m)
		}
		s, _ := m["data"].(string)
		d := []byte(s)
		if m["encoding"] == "base64" {
			var err error
			if d, err = base64.StdEncoding.DecodeString(s); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		if payload, err = fdelta.Apply(base, d); err != nil {
			t.Fatalf("delta at offset %v does not apply: %v", m["offset"], err)
		}
	} else {
		r.fulls++
		var err error
		if payload, err = json.Marshal(m["data"]); err != nil {
			t.Fatal(err)
		}
	}
	r.last[k] = payload
	return payload
}

// sameJSON fails t unless a and b hold the same JSON value.
func sameJSON(t *testing.T, a []byte, b any) {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("payload %q: %v", a, err)
	}
	bb, _ := json.Marshal(b)
	_ = json.Unmarshal(bb, &y)
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	if string(xa) != string(ya) {
		t.Fatalf("payload %s, want %s", xa, ya)
	}
}

func TestDeltaStream(t *testing.T) {
	g := newGateway(t)
	a, b, plain := g.dial(t), g.dial(t), g.dial(t)
	a.subscribe(t, "dash.*", "delta", "fossil")
	b.subscribe(t, "dash.*", "delta", "fossil")
	plain.subscribe(t, "dash.*")
	pub := g.dial(t)
	const n = 6
	for v := range n {
		pub.publish(t, "dash.main", dashboardState(v))
	}
	var ra, rb deltaReader
	for v := range n {
		ma, mb, mp := a.nextOp(t, "message"), b.nextOp(t, "message"), plain.nextOp(t, "message")
		if mp["delta"] != nil {
			t.Fatalf("a plain subscription got %v", mp)
		}
		sameJSON(t, ra.take(t, ma), dashboardState(v))
		sameJSON(t, rb.take(t, mb), dashboardState(v))
		if (v == 0) != (ma["delta"] == nil) {
			t.Fatalf("message %d: delta = %v, want full first and deltas after", v, ma["delta"])
		}
		if v > 0 && ma["data"] != mb["data"] {
			t.Fatalf("two sessions of one pattern got different deltas")
		}
		if v > 0 && len(ma["data"].(string))*5 > len(mustJSON(t, dashboardState(v))) {
			t.Fatalf("delta of %d bytes for a %d-byte state", len(ma["data"].(string)), len(mustJSON(t, dashboardState(v))))
		}
	}
	if ra.deltas != n-1 || rb.deltas != n-1 {
		t.Fatalf("deltas %d and %d, want %d", ra.deltas, rb.deltas, n-1)
	}
}

// TestDeltaAfterDrops: a delta subscriber whose queue drops messages
// (drop_old) still rebuilds every message it receives: after a gap the
// next message of the partition is full, also when it was queued as a
// delta before its base was dropped (session's TestFallbackAfterDrop
// tests that case alone); once it reads again, deltas resume.
func TestDeltaAfterDrops(t *testing.T) {
	const queue = 4
	g := newGateway(t, func(c *gwConfig) {
		// The stalled writer must outlast the test (delivery_test.go).
		c.router.Session = session.Options{QueueMessages: queue,
			WriteTimeout: time.Hour, PingInterval: time.Hour, PongTimeout: time.Hour}
	})
	slow := g.dialPaused(t)
	slow.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "dash.x", "delta": "fossil"})
	slow.send(t, map[string]any{"op": "subscribe", "id": 2, "pattern": "fill"})
	pub := g.dial(t)
	watch := g.dial(t)
	watch.subscribe(t, "dash.x")
	watch.subscribe(t, "fill")
	waitSubscribed(t, g, "", 4)
	// Fill the slow session's socket buffers first, so that its queue
	// overflows while the states follow.
	pad := strings.Repeat("y", 64<<10)
	for i := range 160 {
		pub.publish(t, "fill", map[string]any{"i": i, "pad": pad})
		watch.nextOp(t, "message")
	}
	const n = 400
	for v := range n {
		pub.publish(t, "dash.x", dashboardState(v))
		watch.nextOp(t, "message")
	}
	slow.resume()
	if m := slow.next(t); m["op"] != "welcome" {
		t.Fatalf("first frame %v", m)
	}
	var r deltaReader
	gaps := 0
	for {
		m := slow.next(t)
		if m["op"] == "subscribed" || m["topic"] == "fill" {
			continue
		}
		if m["op"] == "gap" {
			gaps++
			r.take(t, m)
			continue
		}
		off := int(num(m, "offset"))
		sameJSON(t, r.take(t, m), dashboardState(off))
		if off == n-1 {
			break
		}
	}
	if gaps == 0 {
		t.Fatal("no gap: the test did not make the queue drop")
	}
	// Once the client reads again, deltas resume.
	before := r.deltas
	for v := n; v < n+4; v++ {
		pub.publish(t, "dash.x", dashboardState(v))
		m := slow.next(t)
		for m["topic"] == "fill" {
			m = slow.next(t)
		}
		sameJSON(t, r.take(t, m), dashboardState(v))
	}
	if r.deltas-before < 3 {
		t.Fatalf("%d deltas after the drops ended, want at least 3", r.deltas-before)
	}
}

// TestDeltaReplayStartsFull: a catch-up sends full messages, and the first
// live message after it is full too.
func TestDeltaReplayStartsFull(t *testing.T) {
	g := newGateway(t)
	pub := g.dial(t)
	for v := range 3 {
		pub.publish(t, "dash.r", dashboardState(v))
	}
	c := g.dial(t)
	c.subscribe(t, "dash.r", "delta", "fossil", "from", "earliest")
	var r deltaReader
	for v := range 3 {
		m := c.nextOp(t, "message")
		if m["delta"] != nil {
			t.Fatalf("replayed message %v is a delta", m)
		}
		sameJSON(t, r.take(t, m), dashboardState(v))
	}
	for v := 3; v < 6; v++ {
		pub.publish(t, "dash.r", dashboardState(v))
		sameJSON(t, r.take(t, c.nextOp(t, "message")), dashboardState(v))
	}
	if r.deltas == 0 {
		t.Fatal("no delta after the replay")
	}
}

func TestDeltaRequestErrors(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	for _, req := range []map[string]any{
		{"op": "subscribe", "pattern": "a.b", "delta": "vcdiff"},
		{"op": "subscribe", "pattern": "a.b", "delta": true},
		{"op": "subscribe", "pattern": "a.b", "group": "g", "delta": "fossil"},
	} {
		m := c.call(t, req)
		if m["op"] != "error" || m["code"] != "bad_request" {
			t.Fatalf("%v: got %v, want bad_request", req, m)
		}
	}
}

// TestDeltaSSE: delta=fossil on a Server-Sent Events stream; a bad value
// is refused before the stream starts.
func TestDeltaSSE(t *testing.T) {
	g := newGateway(t)
	if s, status := openSSE(t, g.srv.URL, "/v1/sse?pattern=dash.s&delta=xdelta", nil); s != nil || status != 400 {
		t.Fatalf("delta=xdelta: status %d, want 400", status)
	}
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=dash.s&delta=fossil", nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	pub := g.dial(t)
	var r deltaReader
	for v := range 4 {
		pub.publish(t, "dash.s", dashboardState(v))
		sameJSON(t, r.take(t, s.nextEvent(t, "message").frame), dashboardState(v))
	}
	if r.deltas != 3 {
		t.Fatalf("%d deltas, want 3", r.deltas)
	}
}

// TestDeltaLeanEnvelope: a lean session gets its deltas in the lean
// envelope, beside a full-envelope session of the same pattern, and the
// headers and key of each record as in a full message.
func TestDeltaLeanEnvelope(t *testing.T) {
	g := newGateway(t)
	lean, full := g.dialLean(t), g.dial(t)
	lean.subscribe(t, "dash.l", "delta", "fossil")
	full.subscribe(t, "dash.l", "delta", "fossil")
	pub := g.dial(t)
	var rl, rf deltaReader
	for v := range 3 {
		pub.publish(t, "dash.l", dashboardState(v), "key", "k", "headers", map[string]any{"region": "eu"})
		ml, mf := lean.nextOp(t, "message"), full.nextOp(t, "message")
		sameJSON(t, rl.take(t, ml), dashboardState(v))
		sameJSON(t, rf.take(t, mf), dashboardState(v))
		if _, ok := ml["time"]; ok || ml["pattern"] != nil {
			t.Fatalf("lean message %v has time or pattern", ml)
		}
		if _, ok := mf["time"]; !ok || mf["pattern"] != "dash.l" {
			t.Fatalf("full message %v lacks time or pattern", mf)
		}
		for _, m := range []map[string]any{ml, mf} {
			if h, _ := m["headers"].(map[string]any); m["key"] != "k" || h["region"] != "eu" {
				t.Fatalf("message %v lost its key or headers", m)
			}
		}
	}
	if rl.deltas != 2 || rf.deltas != 2 {
		t.Fatalf("deltas %d and %d, want 2 each", rl.deltas, rf.deltas)
	}
}

// TestDeltaBinaryIsFull: a payload that is not JSON is sent full and is no
// base: the JSON record after it is full too, and deltas resume after that.
func TestDeltaBinaryIsFull(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "dash.b", "delta", "fossil")
	pub := g.dial(t)
	pub.publish(t, "dash.b", dashboardState(0))
	pub.publish(t, "dash.b", base64.StdEncoding.EncodeToString([]byte{0xff, 0, 1}), "encoding", "base64")
	pub.publish(t, "dash.b", dashboardState(2))
	pub.publish(t, "dash.b", dashboardState(3))
	want := []any{nil, nil, nil, true}
	for i, w := range want {
		m := c.nextOp(t, "message")
		if m["delta"] != w {
			t.Fatalf("message %d: delta %v, want %v: %v", i, m["delta"], w, m)
		}
		if i == 1 && m["encoding"] != "base64" {
			t.Fatalf("binary message %v", m)
		}
	}
}
