package router_test

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// rawPublisher is a WebSocket client written by hand, so that several
// frames can go out in one segment (one read of the gateway's socket). It
// never reads: what the gateway sends it stays in the socket's buffers.
type rawPublisher struct{ c net.Conn }

// dialRawPublisher upgrades a TCP connection to the gateway's /v1/ws with
// the extra request headers h.
func (g *gateway) dialRawPublisher(t *testing.T, h http.Header) *rawPublisher {
	t.Helper()
	c, _ := g.upgradeRaw(t, h)
	return &rawPublisher{c: c}
}

// upgradeRaw upgrades a TCP connection to the gateway's /v1/ws with the
// extra request headers h, returning it (with a read deadline waitTimeout
// away, closed when the test ends) and the upgrade reply.
func (g *gateway) upgradeRaw(t *testing.T, h http.Header) (net.Conn, *http.Response) {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	var req strings.Builder
	req.WriteString("GET /v1/ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n")
	req.WriteString("Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n")
	for k, vs := range h {
		for _, v := range vs {
			req.WriteString(k + ": " + v + "\r\n")
		}
	}
	req.WriteString("\r\n")
	if _, err := c.Write([]byte(req.String())); err != nil {
		t.Fatal(err)
	}
	if err := c.SetReadDeadline(time.Now().Add(waitTimeout)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %d", resp.StatusCode)
	}
	return c, resp
}

// send writes the requests as masked text frames, all in one write.
func (p *rawPublisher) send(t *testing.T, reqs ...map[string]any) {
	t.Helper()
	var out []byte
	for _, r := range reqs {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, maskedFrame(data)...)
	}
	if _, err := p.c.Write(out); err != nil {
		t.Fatal(err)
	}
}

// maskedFrame encodes a client text frame of up to 65535 bytes.
func maskedFrame(p []byte) []byte {
	key := [4]byte{7, 1, 9, 3}
	out := []byte{0x81}
	if len(p) <= 125 {
		out = append(out, 0x80|byte(len(p)))
	} else {
		out = binary.BigEndian.AppendUint16(append(out, 0x80|126), uint16(len(p)))
	}
	out = append(out, key[:]...)
	for i, b := range p {
		out = append(out, b^key[i%4])
	}
	return out
}

// TestFanOutOfOneReadIsOneBatch: the publishes of one read of a
// publisher's socket reach a subscriber as one WebSocket message (the
// writer is woken once for the read, not once per publish). Without the
// deferral a writer may still happen to batch the read; the deterministic
// checks are session's TestSendDeferredWaitsForFlush and
// TestReaderFlushesPerRead.
func TestFanOutOfOneReadIsOneBatch(t *testing.T) {
	// Only the reader's flush wakes: the bound on deferred wakes would
	// split the batch of a read handled slower than it (stall_test.go).
	g := newGateway(t, func(c *gwConfig) { c.router.Session.MaxDeferredWake = time.Hour })
	sub := g.dial(t)
	sub.subscribe(t, "t")
	pub := g.dialRawPublisher(t, nil)
	const n = 20 // about 1.3 KiB: one segment, one read
	reqs := make([]map[string]any, n)
	for i := range reqs {
		reqs[i] = map[string]any{"op": "publish", "topic": "t", "data": i}
	}
	pub.send(t, reqs...)
	deadline := time.After(waitTimeout)
	for {
		select {
		case data := <-sub.raw:
			if !strings.Contains(string(data), `"op":"message"`) {
				continue // welcome, subscribed
			}
			if got := strings.Count(string(data), `"op":"message"`); got != n || strings.Count(string(data), "\n") != n-1 {
				t.Fatalf("first message batch holds %d messages, want the read's %d", got, n)
			}
			return
		case <-deadline:
			t.Fatal("no message arrived")
		}
	}
}

// TestPublishHookFlushesFirst: a publish whose hook round trip is slow
// does not hold what the publishes before it in the same read fanned out:
// the subscriber has the first record while the hook is still deciding
// the second.
func TestPublishHookFlushesFirst(t *testing.T) {
	gotFirst := make(chan struct{})
	heldTooLong := make(chan struct{}, 1)
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		switch hook {
		case "connect":
			reply(w, map[string]any{"allow": true, "user": "ann",
				"grants": map[string]any{"publish": []string{"free"}, "subscribe": []string{"#"}}})
		case "publish":
			select {
			case <-gotFirst:
			case <-time.After(waitTimeout / 2):
				heldTooLong <- struct{}{}
			}
			reply(w, map[string]any{"allow": true})
		default:
			reply(w, map[string]any{"allow": false})
		}
	})
	g := newGateway(t, withHooks(b))
	sub := g.dialWithHeader(t, appHeaders())
	sub.subscribe(t, "#")
	pub := g.dialRawPublisher(t, appHeaders())
	pub.send(t,
		map[string]any{"op": "publish", "topic": "free", "data": 1},
		map[string]any{"op": "publish", "topic": "hooked", "data": 2})
	if m := sub.nextOp(t, "message"); m["topic"] != "free" {
		t.Fatalf("first message %v", m)
	}
	close(gotFirst)
	if m := sub.nextOp(t, "message"); m["topic"] != "hooked" {
		t.Fatalf("second message %v", m)
	}
	select {
	case <-heldTooLong:
		t.Fatal("the first record waited for the second publish's hook")
	default:
	}
}
