package client_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
)

// TestTopicRecreatedAfterStragglers: the gateway writes topic_deleted
// ahead of the messages of the deleted topic it had queued (a control
// frame), so records of the deleted incarnation may follow the frame; the
// incarnation created next then starts again at offset 0. Those records
// must not hide the new incarnation's: every message reaches the
// application, the new offsets 0 and 1 included, and a gap from 0 of the
// new incarnation is followed by its next record.
func TestTopicRecreatedAfterStragglers(t *testing.T) {
	tests := []struct {
		name   string
		frames []string // after topic_deleted: m<offset> a message, g<from>-<to> a gap
		want   []string // what the application gets after the first three messages
	}{
		{"stragglers then offset 0", []string{"m3", "m4", "m0", "m1"}, []string{"m3", "m4", "m0", "m1"}},
		{"stragglers then a gap from 0", []string{"m3", "g0-2", "m2"}, []string{"m3", "g0-2", "m2"}},
		{"no straggler", []string{"m0", "m1"}, []string{"m0", "m1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := newFakeGateway(t, func(n int, fc *fakeConn) {
				if n > 1 || !fc.welcome("e1") {
					return
				}
				req := fc.request()
				if req == nil {
					return
				}
				fc.send(map[string]any{"op": "subscribed", "id": req["id"], "pattern": "room"})
				for off := range int64(3) {
					fc.message("room", "room", off, off)
				}
				fc.send(map[string]any{"op": "topic_deleted", "pattern": "room", "topic": "room"})
				for _, f := range tt.frames {
					var a, b int64
					switch f[0] {
					case 'm':
						fmt.Sscanf(f[1:], "%d", &a)
						fc.message("room", "room", a, a)
					case 'g':
						fmt.Sscanf(f[1:], "%d-%d", &a, &b)
						fc.send(map[string]any{"op": "gap", "pattern": "room", "topic": "room", "partition": 0, "from": a, "to": b})
					}
				}
				fc.hold()
			})
			got := make(chan string, 16)
			deleted := make(chan struct{}, 1)
			c, err := client.Dial(testCtx(t), g.URL, &client.Options{
				OnGap:          func(gp client.Gap) { got <- fmt.Sprintf("g%d-%d", gp.From, gp.To) },
				OnTopicDeleted: func(client.TopicDeleted) { deleted <- struct{}{} },
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			if _, err := c.Subscribe(testCtx(t), "room", client.SubscribeOptions{}, func(m *client.Message) {
				got <- fmt.Sprintf("m%d", m.Offset)
			}); err != nil {
				t.Fatal(err)
			}
			want := append([]string{"m0", "m1", "m2"}, tt.want...)
			for i, w := range want {
				select {
				case f := <-got:
					if f != w {
						t.Fatalf("delivery %d: %s, want %s (all: %v)", i, f, w, want)
					}
				case <-time.After(2 * time.Second):
					t.Fatalf("delivery %d (%s) never came; want %v", i, w, want)
				}
			}
			select {
			case <-deleted:
			case <-time.After(2 * time.Second):
				t.Fatal("OnTopicDeleted not called")
			}
		})
	}
}
