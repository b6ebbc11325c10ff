package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// TestDefaultFlagsFitLargestPublish runs the gateway with its default
// flags and publishes data of exactly --max-message-bytes in the largest
// envelope the other default limits allow (escaped as Go's encoding/json
// escapes '<'), then one byte more: the first is stored, the second gets
// message_too_large, and the same session publishes again.
func TestDefaultFlagsFitLargestPublish(t *testing.T) {
	n := startNode(t)
	w := dialNode(t, n)
	frame := func(id, dataBytes int) []byte {
		headers := map[string]string{}
		for i := range router.DefaultMaxHeaders {
			name := fmt.Sprintf("%s%02d", strings.Repeat("<", 14), i)
			headers[name] = strings.Repeat("<", router.DefaultMaxHeaderBytes/router.DefaultMaxHeaders-len(name))
		}
		b, err := json.Marshal(map[string]any{
			"op": "publish", "id": id, "topic": strings.Repeat("t", 255),
			"data":     json.RawMessage(`"` + strings.Repeat("x", dataBytes-2) + `"`),
			"key":      strings.Repeat("<", router.DefaultMaxKeyBytes),
			"msg_id":   strings.Repeat("<", router.DefaultMaxMsgIDBytes)[:router.DefaultMaxMsgIDBytes-3] + fmt.Sprintf("%03d", id),
			"headers":  headers,
			"priority": 3,
		})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	write := func(b []byte) {
		t.Helper()
		if err := w.c.Write(context.Background(), websocket.MessageText, b); err != nil {
			t.Fatal(err)
		}
	}
	reply := func(what string) map[string]any {
		t.Helper()
		select {
		case m := <-w.frames:
			return m
		case <-w.done:
			t.Fatalf("%s: the session closed", what)
		case <-time.After(20 * time.Second):
			t.Fatalf("%s: no reply", what)
		}
		return nil
	}
	const maxData = 1 << 20 // the default --max-message-bytes
	write(frame(1, maxData))
	if m := reply("publish of exactly --max-message-bytes"); m["op"] != "published" {
		t.Fatalf("publish of exactly --max-message-bytes: %v", m)
	}
	write(frame(2, maxData+1))
	if m := reply("publish one byte over"); m["op"] != "error" || m["code"] != "message_too_large" {
		t.Fatalf("publish one byte over --max-message-bytes: %v, want message_too_large", m)
	}
	w.send(t, map[string]any{"op": "publish", "id": 3, "topic": "after", "data": 1})
	if m := reply("publish after the refusal"); m["op"] != "published" {
		t.Fatalf("publish after the refusal: %v", m)
	}
}
