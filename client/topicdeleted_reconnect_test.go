package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
)

// TestStragglersOfDeletedTopicAcrossReconnect: messages of a
// deleted topic written after its topic_deleted frame (stragglers) set the
// subscription's position again, the deleted marks are forgotten with the
// connection, and so the resume after a reconnect names the deleted
// incarnation's offset and the next incarnation's offsets up to it are
// dropped as duplicates.
func TestStragglersOfDeletedTopicAcrossReconnect(t *testing.T) {
	seen4 := make(chan struct{})
	resumed := make(chan any, 1)
	g := newFakeGateway(t, func(n int, fc *fakeConn) {
		if n > 2 || !fc.welcome("e1") {
			return
		}
		req := fc.request()
		if req == nil {
			return
		}
		fc.send(map[string]any{"op": "subscribed", "id": req["id"], "pattern": "room", "recovered": n == 2})
		if n == 1 {
			for off := range int64(3) {
				fc.message("room", "room", off, off)
			}
			fc.send(map[string]any{"op": "topic_deleted", "pattern": "room", "topic": "room"})
			fc.message("room", "room", 3, 3) // stragglers of the deleted incarnation
			fc.message("room", "room", 4, 4)
			select {
			case <-seen4:
			case <-time.After(5 * time.Second):
			}
			return // the connection is lost before the topic is made again
		}
		resumed <- req["from"]
		// The topic made again: its first records.
		fc.message("room", "room", 0, 0)
		fc.message("room", "room", 1, 1)
		fc.hold()
	})
	got := make(chan string, 16)
	c, err := client.Dial(testCtx(t), g.URL, &client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, err := c.Subscribe(testCtx(t), "room", client.SubscribeOptions{}, func(m *client.Message) {
		got <- fmt.Sprintf("m%d", m.Offset)
		if m.Offset == 4 {
			close(seen4)
		}
	}); err != nil {
		t.Fatal(err)
	}
	var from any
	want := []string{"m0", "m1", "m2", "m3", "m4", "m0", "m1"}
	for i, w := range want {
		select {
		case f := <-got:
			if f != w {
				t.Fatalf("delivery %d: %s, want %s", i, f, w)
			}
		case from = <-resumed:
			select {
			case f := <-got:
				if f != w {
					t.Fatalf("delivery %d: %s, want %s", i, f, w)
				}
			case <-time.After(3 * time.Second):
				t.Fatalf("delivery %d (%s) never came: the next incarnation was dropped after a resume from %v", i, w, from)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("delivery %d (%s) never came (resume from %v)", i, w, from)
		}
	}
}
