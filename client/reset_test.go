package client_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
)

// TestResetSurvivesLostResubscribe: after a reconnect to a gateway whose
// log has another epoch, the connection is lost right after the first
// resubscribe, before its reply. On the next connection the reset must
// still be reported and the new log delivered from its start; or, when
// that connection is back on the old epoch, the old positions must still
// apply (no reset, no duplicate).
func TestResetSurvivesLostResubscribe(t *testing.T) {
	tests := []struct {
		name       string
		thirdEpoch string   // the epoch of the connection after the lost one
		log        []string // what that connection delivers: offset:data
		want       []string // what the application gets after the first three
		reset      bool
	}{
		{"new epoch", "e2", []string{"0:100", "1:101"}, []string{"0:100", "1:101"}, true},
		{"back on the old epoch", "e1", []string{"2:2", "3:3"}, []string{"3:3"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handled := make(chan struct{})
			var mu sync.Mutex
			var froms []string // the from of every subscribe, in order
			g := newFakeGateway(t, func(n int, fc *fakeConn) {
				epoch := map[int]string{1: "e1", 2: "e2"}[n]
				if epoch == "" {
					epoch = tt.thirdEpoch
				}
				if !fc.welcome(epoch) {
					return
				}
				req := fc.request()
				if req == nil {
					return
				}
				from, _ := json.Marshal(req["from"])
				mu.Lock()
				froms = append(froms, string(from))
				mu.Unlock()
				switch n {
				case 1:
					fc.send(map[string]any{"op": "subscribed", "id": req["id"], "pattern": "ledger"})
					for off := range int64(3) {
						fc.message("ledger", "ledger", off, off)
					}
					select { // the client has them; then the connection drops
					case <-handled:
					case <-fc.ctx.Done():
					}
				case 2:
					// Lost right after the first resubscribe on the new epoch.
				default:
					// Answered as the gateway does: recovered for positions
					// only, true when they belong to this log.
					reply := map[string]any{"op": "subscribed", "id": req["id"], "pattern": "ledger"}
					if f, ok := req["from"].(map[string]any); ok && f["positions"] != nil {
						reply["recovered"] = f["epoch"] == epoch
					}
					fc.send(reply)
					for _, rec := range tt.log {
						var off, data int64
						fmt.Sscanf(rec, "%d:%d", &off, &data)
						fc.message("ledger", "ledger", off, data)
					}
					fc.hold()
				}
			})
			resets := make(chan client.Reset, 4)
			c, err := client.Dial(testCtx(t), g.URL, &client.Options{
				Reconnect: client.ReconnectPolicy{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
				OnReset:   func(r client.Reset) { resets <- r },
			})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = c.Close() })
			sub, err := c.SubscribeChan(testCtx(t), "ledger", client.SubscribeOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for off := range int64(3) {
				if m := recv(t, sub.C); m.Offset != off {
					t.Fatalf("offset %d, want %d", m.Offset, off)
				}
			}
			close(handled)
			for _, want := range tt.want {
				m := recv(t, sub.C)
				if got := fmt.Sprintf("%d:%s", m.Offset, m.Data); got != want {
					t.Fatalf("got %s, want %s", got, want)
				}
			}
			// The reset, if any, was handed to OnReset before the records
			// that followed its reply.
			select {
			case r := <-resets:
				if !tt.reset {
					t.Fatalf("reset %+v, want none", r)
				}
				if r.Pattern != "ledger" || !r.EpochChanged {
					t.Fatalf("reset %+v", r)
				}
			default:
				if tt.reset {
					mu.Lock()
					defer mu.Unlock()
					t.Fatalf("the new log was delivered without a reset; subscribes sent from %v", froms)
				}
			}
		})
	}
}
