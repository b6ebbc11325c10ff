package client_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/centrifugal/fdelta"
	"github.com/coder/websocket"
)

// TestDeltaFailedStopsTheBatch: a delta without its base makes the
// client reconnect and resume from its positions; a later message of the
// same WebSocket message (here the partition's next record, full) must
// not be delivered first, or its position skips the failed one, which the
// resume then never asks for: a loss without a gap.
func TestDeltaFailedStopsTheBatch(t *testing.T) {
	froms := make(chan any, 4)
	g := deltaGateway(t, froms, func(n int, fc *fakeConn, _ map[string]any) {
		if n > 1 {
			fc.message("dash", "dash", 0, dashState(0))
			fc.message("dash", "dash", 1, dashState(1))
			fc.hold()
			return
		}
		var lines []string
		for _, f := range []map[string]any{
			{"op": "message", "pattern": "dash", "topic": "dash", "partition": 0, "offset": 0,
				"data": string(fdelta.Create(dashState(9), dashState(0))), "delta": true},
			{"op": "message", "pattern": "dash", "topic": "dash", "partition": 0, "offset": 1, "data": dashState(1)},
		} {
			b, _ := json.Marshal(f)
			lines = append(lines, string(b))
		}
		if fc.conn.Write(fc.ctx, websocket.MessageText, []byte(strings.Join(lines, "\n"))) != nil {
			return
		}
		fc.hold()
	})
	sub := dialDelta(t, g, func(error) {})
	<-froms
	select {
	case from := <-froms:
		if b, _ := json.Marshal(from); strings.Contains(string(b), `"offset":1`) {
			t.Fatalf("resubscribe from %s: offset 0 (the failed delta) is never asked for again", b)
		}
	case <-time.After(wait):
		t.Fatal("no resubscribe")
	}
	for v := range 2 {
		if m := recv(t, sub.C); m.Offset != int64(v) || string(m.Data) != string(dashState(v)) {
			t.Fatalf("got offset %d %.40s, want %d", m.Offset, m.Data, v)
		}
	}
}
