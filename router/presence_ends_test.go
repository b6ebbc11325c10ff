package router_test

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/session"
)

// TestPresenceMemberEndsCounted: the end of every presence member's
// session is counted by its reason. A member that stops reading while
// large records of its topic arrive is ended by the write timeout: its
// connection is dropped without a close frame (the write it cuts short
// leaves half a frame), and the count says write_timeout, the reason no
// frame can carry. A member that leaves by itself counts as peer.
func TestPresenceMemberEndsCounted(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.Session = session.Options{WriteTimeout: 300 * time.Millisecond}
	})
	ends := func(reason string) float64 {
		return metricValue(t, g.reg, "switchyard_presence_member_sessions_ended_total", map[string]string{"reason": reason})
	}

	leaver := g.dial(t)
	leaver.mustOK(t, map[string]any{"op": "subscribe", "id": "p", "pattern": "room", "presence": true}, "subscribed")
	leaver.conn.CloseNow()
	waitUntil(t, "the leaving member's end to be counted", func() bool { return ends("peer") == 1 })

	stalled := g.dialRawWS(t)
	stalled.writeFrame(t, true, opText, []byte(`{"op":"subscribe","id":"s","pattern":"room","presence":true}`), 0)
	if op, p := stalled.readFrame(t); op != opText || !strings.Contains(string(p), `"subscribed"`) {
		t.Fatalf("reply %d %q", op, p)
	}
	pub := g.dial(t)
	data := strings.Repeat("x", 256<<10)
	for i := 0; ends("write_timeout") == 0; i++ {
		if i == 400 { // 100 MiB: far more than any socket buffers
			t.Fatalf("the stalled member was not ended; ends by reason: write_timeout %v, peer %v, keepalive %v",
				ends("write_timeout"), ends("peer"), ends("keepalive"))
		}
		pub.mustOK(t, map[string]any{"op": "publish", "id": i, "topic": "room", "data": data}, "published")
	}
	if v := ends("write_timeout"); v != 1 {
		t.Fatalf("write_timeout ends %v, want 1", v)
	}
	for _, r := range []string{"closed", "keepalive", "slow_consumer", "control_overflow", "message_timeout"} {
		if v := ends(r); v != 0 {
			t.Errorf("%s ends %v, want 0", r, v)
		}
	}
	// What the stalled member reads now: the frames the socket held, then
	// the end, with no close frame.
	var err error
	for range 10000 {
		var op byte
		if op, _, err = stalled.tryReadFrame(); err != nil {
			break
		}
		if op == opClose {
			t.Fatal("a close frame after the write timeout")
		}
	}
	if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("the stalled member's connection ended with %v, want EOF", err)
	}
	t.Logf("the stalled member's connection ended with %v", err)
}
