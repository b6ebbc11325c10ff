package router_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// largestPublish returns a publish whose data is data and whose envelope
// is the largest the default bounds allow, as Go's encoding/json writes
// it: a 128-byte id, a 255-byte topic, and a key, msg_id and headers at
// their limits made of '<', which it escapes to six bytes each.
func largestPublish(t *testing.T, data string) []byte {
	t.Helper()
	topic := strings.Repeat("t", 255)
	headers := map[string]string{}
	for i := range router.DefaultMaxHeaders {
		name := fmt.Sprintf("%s%02d", strings.Repeat("<", 14), i)
		headers[name] = strings.Repeat("<", router.DefaultMaxHeaderBytes/router.DefaultMaxHeaders-len(name))
	}
	frame, err := json.Marshal(map[string]any{
		"op":       "publish",
		"id":       strings.Repeat("i", router.DefaultMaxIDBytes-2),
		"topic":    topic,
		"data":     json.RawMessage(data),
		"key":      strings.Repeat("<", router.DefaultMaxKeyBytes),
		"msg_id":   strings.Repeat("<", router.DefaultMaxMsgIDBytes),
		"headers":  headers,
		"priority": 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	return frame
}

// TestLargestPublishKeepsSession publishes, with the default options,
// data of exactly the message limit in the largest envelope the other
// limits allow, then one byte more: the first is stored, the second
// refused with message_too_large, and the session goes on publishing.
func TestLargestPublishKeepsSession(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	limits := c.welcome["limits"].(map[string]any)
	maxData := int(num(limits, "max_message_bytes"))
	if maxData != 1<<20 {
		t.Fatalf("max_message_bytes %d, want the default 1 MiB", maxData)
	}
	if got, want := num(limits, "max_frame_bytes"), int64(maxData+router.PublishEnvelopeBytes(router.Bounds{})); got != want {
		t.Fatalf("max_frame_bytes %d, want max_message_bytes plus the envelope, %d", got, want)
	}
	quoted := func(n int) string { return `"` + strings.Repeat("x", n-2) + `"` }
	// reply returns the next frame, or fails with the close that ended
	// the session instead.
	reply := func(what string) map[string]any {
		t.Helper()
		select {
		case m := <-c.frames:
			return m
		case <-c.done:
			t.Fatalf("%s: the session closed with %d", what, c.closeStatus(t))
		case <-time.After(waitTimeout):
			t.Fatalf("%s: no reply within %v", what, waitTimeout)
		}
		return nil
	}

	frame := largestPublish(t, quoted(maxData))
	t.Logf("largest publish: %d bytes of data in a %d-byte frame (max_frame_bytes %d)", maxData, len(frame), num(limits, "max_frame_bytes"))
	c.sendRaw(t, websocket.MessageText, frame)
	if m := reply("publish of exactly max_message_bytes"); m["op"] != "published" {
		t.Fatalf("publish of exactly max_message_bytes: %v", m)
	}

	c.sendRaw(t, websocket.MessageText, largestPublish(t, quoted(maxData+1)))
	if m := reply("publish one byte over max_message_bytes"); m["op"] != "error" || m["code"] != "message_too_large" {
		t.Fatalf("publish one byte over max_message_bytes: %v, want message_too_large", m)
	}
	c.publish(t, "after", 1)
}
