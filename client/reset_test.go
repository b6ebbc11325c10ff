package client_test

import (
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
)

// TestResetSurvivesLostResubscribe: after a reconnect to a gateway whose
// log has another epoch, the connection is lost right after the first
// resubscribe, before its reply. The reset must still be reported on the
// next connection, and the new log delivered from its start.
func TestResetSurvivesLostResubscribe(t *testing.T) {
	handled := make(chan struct{})
	var mu sync.Mutex
	var froms []string // the from of every subscribe, in order
	g := newFakeGateway(t, func(n int, fc *fakeConn) {
		epoch := "e2"
		if n == 1 {
			epoch = "e1"
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
			reply := map[string]any{"op": "subscribed", "id": req["id"], "pattern": "ledger"}
			if f, ok := req["from"].(map[string]any); ok && f["positions"] != nil {
				reply["recovered"] = f["epoch"] == epoch
			}
			fc.send(reply)
			// The new log, from its start.
			fc.message("ledger", "ledger", 0, 100)
			fc.message("ledger", "ledger", 1, 101)
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
	for i, want := range []string{"100", "101"} {
		m := recv(t, sub.C)
		if m.Offset != int64(i) || string(m.Data) != want {
			t.Fatalf("got offset %d data %s, want offset %d data %s", m.Offset, m.Data, i, want)
		}
	}
	select {
	case r := <-resets:
		if r.Pattern != "ledger" || !r.EpochChanged {
			t.Fatalf("reset %+v", r)
		}
	default:
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("the new log was delivered without a reset; subscribes sent from %v", froms)
	}
}
