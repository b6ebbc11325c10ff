package router_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/session"
)

// rawWS is a WebSocket client written by hand on a TCP socket, so that a
// test can send fragments and partial frames as it pleases.
type rawWS struct {
	conn net.Conn
	br   *bufio.Reader
}

// WebSocket opcodes.
const (
	opContinuation = 0x0
	opText         = 0x1
	opClose        = 0x8
	opPing         = 0x9
)

func (g *gateway) dialRawWS(t *testing.T) *rawWS {
	t.Helper()
	addr := strings.TrimPrefix(g.srv.URL, "http://")
	conn, err := net.DialTimeout("tcp", addr, waitTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	var key [16]byte
	_, _ = rand.Read(key[:])
	fmt.Fprintf(conn, "GET /v1/ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n", addr, base64.StdEncoding.EncodeToString(key[:]))
	w := &rawWS{conn: conn, br: bufio.NewReader(conn)}
	_ = conn.SetReadDeadline(time.Now().Add(waitTimeout))
	resp, err := http.ReadResponse(w.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %s", resp.Status)
	}
	if op, p := w.readFrame(t); op != opText || !strings.Contains(string(p), `"op":"welcome"`) {
		t.Fatalf("first frame %d %q", op, p)
	}
	return w
}

// writeFrame sends one masked frame. declared, when larger than the
// payload, is the length the header announces (a partial frame).
func (w *rawWS) writeFrame(t *testing.T, fin bool, op byte, payload []byte, declared int) {
	t.Helper()
	declared = max(declared, len(payload))
	b0 := op
	if fin {
		b0 |= 0x80
	}
	hdr := []byte{b0, 0}
	switch {
	case declared < 126:
		hdr[1] = byte(declared)
	case declared <= 0xffff:
		hdr[1] = 126
		hdr = binary.BigEndian.AppendUint16(hdr, uint16(declared))
	default:
		hdr[1] = 127
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(declared))
	}
	hdr[1] |= 0x80
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	hdr = append(hdr, mask[:]...)
	masked := make([]byte, len(payload))
	for i := range payload {
		masked[i] = payload[i] ^ mask[i%4]
	}
	_ = w.conn.SetWriteDeadline(time.Now().Add(waitTimeout))
	if _, err := w.conn.Write(append(hdr, masked...)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// readFrame reads one server frame, failing on timeout or EOF.
func (w *rawWS) readFrame(t *testing.T) (op byte, payload []byte) {
	t.Helper()
	op, payload, err := w.tryReadFrame()
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return op, payload
}

func (w *rawWS) tryReadFrame() (op byte, payload []byte, err error) {
	_ = w.conn.SetReadDeadline(time.Now().Add(waitTimeout))
	var h [2]byte
	if _, err := io.ReadFull(w.br, h[:]); err != nil {
		return 0, nil, err
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(w.br, b[:]); err != nil {
			return 0, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(w.br, b[:]); err != nil {
			return 0, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(w.br, payload); err != nil {
		return 0, nil, err
	}
	return h[0] & 0x0f, payload, nil
}

// closeCode reads frames until the server's close frame and returns its
// status code; pings and other frames are skipped.
func (w *rawWS) closeCode(t *testing.T) int {
	t.Helper()
	for range 1000 {
		op, p, err := w.tryReadFrame()
		if err != nil {
			t.Fatalf("no close frame: %v", err)
		}
		if op == opClose {
			if len(p) < 2 {
				return 1005
			}
			return int(binary.BigEndian.Uint16(p))
		}
	}
	t.Fatal("no close frame in 1000 frames")
	return 0
}

// TestFragmentedMessages: messages sent in fragments, of every size class
// the reader buffers differently, arrive whole.
func TestFragmentedMessages(t *testing.T) {
	g := newGateway(t)
	sub := g.dial(t)
	sub.subscribe(t, "frag")
	w := g.dialRawWS(t)
	for i, size := range []int{10, 4000, 5000, 70 << 10, 300 << 10} {
		data := strings.Repeat("d", size)
		frame := []byte(fmt.Sprintf(`{"op":"publish","id":%d,"topic":"frag","data":%q}`, i, data))
		// Four fragments of uneven sizes, with a ping between two of them.
		cuts := []int{0, len(frame) / 7, len(frame) / 2, len(frame) - 3, len(frame)}
		for j := 0; j+1 < len(cuts); j++ {
			op := byte(opContinuation)
			if j == 0 {
				op = opText
			}
			w.writeFrame(t, j+2 == len(cuts), op, frame[cuts[j]:cuts[j+1]], 0)
			if j == 1 {
				w.writeFrame(t, true, opPing, []byte("p"), 0)
			}
		}
		for {
			op, p := w.readFrame(t)
			if op != opText {
				continue // the pong
			}
			var m map[string]any
			if err := json.Unmarshal(p, &m); err != nil || m["op"] != "published" || num(m, "id") != int64(i) {
				t.Fatalf("size %d: reply %.200s", size, p)
			}
			break
		}
		if m := sub.nextOp(t, "message"); m["data"] != data {
			t.Fatalf("size %d: data of %d bytes arrived", size, len(fmt.Sprint(m["data"])))
		}
	}
}

// TestUnfinishedMessageTimesOut: a message left unfinished, in fragments
// or as a partial frame, closes the session with 1008 after the message
// timeout.
func TestUnfinishedMessageTimesOut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	g := newGateway(t, func(c *gwConfig) { c.router.Session = session.Options{MessageTimeout: timeout} })
	chunk := []byte(`{"op":"publish","topic":"frag","data":"` + strings.Repeat("x", 100<<10))
	tests := []struct {
		name string
		send func(w *rawWS)
	}{
		{"fragments", func(w *rawWS) {
			w.writeFrame(t, false, opText, chunk, 0)
			w.writeFrame(t, false, opContinuation, []byte(strings.Repeat("x", 100<<10)), 0)
		}},
		{"partial frame", func(w *rawWS) { w.writeFrame(t, true, opText, chunk, 900<<10) }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := g.dialRawWS(t)
			start := time.Now()
			tt.send(w)
			if code := w.closeCode(t); code != 1008 {
				t.Fatalf("close %d, want 1008", code)
			}
			if d := time.Since(start); d < timeout {
				t.Fatalf("closed after %v, before the timeout", d)
			}
			// A client that gets no answer gives up; the gateway then
			// lets go at once (a silent one is dropped after the close
			// handshake's timeout).
			w.conn.Close()
			waitUntil(t, "the refusal is counted", func() bool {
				return metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "message_timeout"}) == float64(i+1)
			})
		})
	}
	// A session that is merely idle between messages is not affected.
	c := g.dial(t)
	time.Sleep(2 * timeout) // idle on purpose: nothing to wait for
	c.publish(t, "idle", 1)
}

// TestUnfinishedMessageHoldsWhatArrived: sessions parking unfinished
// fragmented messages hold about the bytes that arrived (in 64 KiB chunks),
// as switchyard_inbound_partial_bytes shows, and nothing once they end.
func TestUnfinishedMessageHoldsWhatArrived(t *testing.T) {
	const (
		sessions = 4
		sent     = 960 << 10 // per session
		chunk    = 64 << 10
	)
	g := newGateway(t)
	var ws []*rawWS
	for range sessions {
		w := g.dialRawWS(t)
		w.writeFrame(t, false, opText, []byte(`{"op":"publish","topic":"frag","data":"`), 0)
		for i := 0; i < sent/(32<<10); i++ {
			w.writeFrame(t, false, opContinuation, []byte(strings.Repeat("x", 32<<10)), 0)
		}
		ws = append(ws, w)
	}
	// The first 4 KiB stay in each session's small buffer; the rest is in
	// chunks, at most one of them not full.
	low, high := float64(sessions*(sent-(4<<10))), float64(sessions*(sent+chunk))
	var held float64
	waitUntil(t, "the fragments have arrived", func() bool {
		held = counterSum(t, g, "switchyard_inbound_partial_bytes")
		return held >= low
	})
	if held > high {
		t.Fatalf("%d sessions with %d bytes unfinished each hold %v bytes (at most %v)", sessions, sent, held, high)
	}
	t.Logf("%d sessions parking %d bytes each hold %v bytes of chunks", sessions, sent, held)
	for _, w := range ws {
		w.conn.Close()
	}
	waitUntil(t, "the sessions let go", func() bool { return counterSum(t, g, "switchyard_inbound_partial_bytes") == 0 })
}

// TestInboundPartialBudget: the unfinished messages of all sessions hold
// at most --max-inbound-partial-bytes of read buffers together. A session
// that needs more past it waits (it is not closed) and its message goes
// through once another session's buffers come back.
func TestInboundPartialBudget(t *testing.T) {
	const budget = 1 << 20
	g := newGateway(t, func(c *gwConfig) {
		c.router.Bounds.MaxInboundPartialBytes = budget
		c.router.Session.ReadLimit = budget // the budget holds one largest frame
	})
	sub := g.dial(t)
	sub.subscribe(t, "budget")
	park := func() *rawWS {
		w := g.dialRawWS(t)
		w.writeFrame(t, false, opText, []byte(`{"op":"publish","topic":"budget","data":"`), 0)
		for range 600 / 32 {
			w.writeFrame(t, false, opContinuation, []byte(strings.Repeat("x", 32<<10)), 0)
		}
		return w
	}
	first, _ := park(), park() // 2 × 600 KiB unfinished: past the budget
	waitUntil(t, "the budget to be spent", func() bool {
		return counterSum(t, g, "switchyard_inbound_partial_bytes") == budget &&
			counterSum(t, g, "switchyard_inbound_partial_waits_total") >= 1
	})
	// A whole 100 KiB message needs a chunk too: it waits.
	w := g.dialRawWS(t)
	data := strings.Repeat("d", 100<<10)
	w.writeFrame(t, true, opText, []byte(fmt.Sprintf(`{"op":"publish","id":1,"topic":"budget","data":%q}`, data)), 0)
	waitUntil(t, "the third session to wait", func() bool {
		return counterSum(t, g, "switchyard_inbound_partial_waits_total") >= 2
	})
	if held := counterSum(t, g, "switchyard_inbound_partial_bytes"); held > budget {
		t.Fatalf("unfinished messages hold %v bytes, budget %d", held, budget)
	}
	first.conn.Close() // its chunks come back
	for {
		op, p := w.readFrame(t)
		if op != opText {
			continue
		}
		if !strings.Contains(string(p), `"op":"published"`) {
			t.Fatalf("reply %.200s", p)
		}
		break
	}
	if m := sub.nextOp(t, "message"); m["data"] != data {
		t.Fatalf("data of %d bytes arrived", len(fmt.Sprint(m["data"])))
	}
	if v := counterSum(t, g, "switchyard_inbound_partial_limit_bytes"); v != budget {
		t.Errorf("inbound_partial_limit_bytes = %v, want %d", v, budget)
	}
}
