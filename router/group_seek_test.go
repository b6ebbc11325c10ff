package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSeekStormKeepsHealthyMember: an admin seeking a group back to its
// start over and over, faster than the member's socket takes each window,
// does not close a member that reads and acks: deliveries a seek made
// obsolete never pile up past the member's reliable bound.
func TestSeekStormKeepsHealthyMember(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Session.QueueMessages = 16 })
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "storm", "partitions": 1}); code != 201 {
		t.Fatal("create failed")
	}
	big := strings.Repeat("x", 32<<10)
	for i := range 64 {
		if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "storm", "data": map[string]any{"i": i, "pad": big}}); code != 200 {
			t.Fatalf("publish: %d %v", code, body)
		}
	}
	member := g.dial(t)
	member.subscribe(t, "storm", "group", "stormers", "max_in_flight", 1000)

	// The member reads everything and acks every message, until stop.
	stop := make(chan struct{})
	var acked atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case m := <-member.frames:
				if m["op"] != "message" {
					continue
				}
				data, _ := json.Marshal(map[string]any{"op": "ack", "group": "stormers", "topic": "storm", "partition": m["partition"], "offset": m["offset"]})
				ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
				err := member.conn.Write(ctx, websocket.MessageText, data)
				cancel()
				if err != nil {
					return // closed: reported below
				}
				acked.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	// The storm: seekers back to offset 0, bounded in count and time (a
	// seek now waits for the member to take the window before it, so the
	// storm goes at the member's pace and ends at its deadline).
	const seekers, seeksEach = 4, 100
	body, _ := json.Marshal(map[string]any{"topic": "storm", "offset": 0})
	deadline := time.Now().Add(6 * time.Second)
	var seeks, failed atomic.Int64
	var sw sync.WaitGroup
	for range seekers {
		sw.Add(1)
		go func() {
			defer sw.Done()
			for range seeksEach {
				select {
				case <-member.done:
					return
				default:
				}
				if time.Now().After(deadline) {
					return
				}
				resp, err := g.srv.Client().Post(g.srv.URL+"/v1/groups/stormers/seek", "application/json", bytes.NewReader(body))
				if err != nil {
					failed.Add(1)
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
				seeks.Add(1)
			}
		}()
	}
	sw.Wait()
	t.Logf("%d seeks (%d refused), %d acks", seeks.Load(), failed.Load(), acked.Load())
	select {
	case <-member.done:
		t.Fatalf("member closed during the seek storm (status %v) after %d seeks", member.closeStatus(t), seeks.Load())
	default:
	}
	if failed.Load() > 0 {
		t.Fatalf("%d seeks refused", failed.Load())
	}
	// Still a member: a record published now reaches it.
	before := acked.Load()
	g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "storm", "data": "after"})
	for acked.Load() == before {
		select {
		case <-member.done:
			t.Fatalf("member closed (status %v)", member.closeStatus(t))
		case <-time.After(time.Millisecond):
		}
		if time.Now().After(deadline.Add(waitTimeout)) { // bounds the wait
			t.Fatal("no delivery after the storm")
		}
	}
}
