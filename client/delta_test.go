package client_test

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/centrifugal/fdelta"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

// dashState is version v of a 2 KiB JSON object of which a few fields
// change from one version to the next.
func dashState(v int) json.RawMessage {
	var b strings.Builder
	fmt.Fprintf(&b, `{"version":%d,"cpu":%d`, v, v%97)
	for i := range 40 {
		fmt.Fprintf(&b, `,"gauge_%02d":"%s%d"`, i, strings.Repeat("x", 30), i)
	}
	b.WriteString("}")
	return json.RawMessage(b.String())
}

// TestDeltaSubscription: against a gateway, a Delta subscription delivers
// every payload whole, byte for byte as published, and a plain one beside
// it the same.
func TestDeltaSubscription(t *testing.T) {
	g := newGateway(t, engine.GroupPolicy{})
	c := dial(t, g, nil)
	sub, err := c.SubscribeChan(testCtx(t), "dash.*", client.SubscribeOptions{Delta: true})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.SubscribeChan(testCtx(t), "dash.main", client.SubscribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for v := range 5 {
		if _, err := c.Publish(testCtx(t), "dash.main", dashState(v)); err != nil {
			t.Fatal(err)
		}
		for _, ch := range []<-chan *client.Message{sub.C, plain.C} {
			if m := recv(t, ch); string(m.Data) != string(dashState(v)) || m.Encoding != "" {
				t.Fatalf("version %d: got %.80s (encoding %q)", v, m.Data, m.Encoding)
			}
		}
	}
}

// TestDeltaFrames: scripted frames: a full message, a delta as text, a
// delta in base64, then a delta without its base, which is reported to
// OnError and makes the client reconnect and resume from its positions.
func TestDeltaFrames(t *testing.T) {
	froms := make(chan any, 4)
	g := deltaGateway(t, froms, func(n int, fc *fakeConn, req map[string]any) {
		if req["delta"] != "fossil" {
			t.Errorf("subscribe %v, want delta fossil", req)
		}
		if n > 1 {
			fc.message("dash", "dash", 4, dashState(4)) // full, after the resume
			fc.hold()
			return
		}
		fc.message("dash", "dash", 0, dashState(0))
		d1 := fdelta.Create(dashState(0), dashState(1))
		fc.send(map[string]any{"op": "message", "pattern": "dash", "topic": "dash", "partition": 0, "offset": 1,
			"data": string(d1), "delta": true})
		d2 := fdelta.Create(dashState(1), dashState(2))
		fc.send(map[string]any{"op": "message", "pattern": "dash", "topic": "dash", "partition": 0, "offset": 2,
			"data": base64.StdEncoding.EncodeToString(d2), "encoding": "base64", "delta": true})
		fc.send(map[string]any{"op": "gap", "pattern": "dash", "topic": "dash", "partition": 0, "from": 3, "to": 4, "reason": "queue_full"})
		// A delta after the gap has no base.
		fc.send(map[string]any{"op": "message", "pattern": "dash", "topic": "dash", "partition": 0, "offset": 4,
			"data": string(fdelta.Create(dashState(3), dashState(4))), "delta": true})
		fc.hold()
	})
	errs := make(chan error, 4)
	sub := dialDelta(t, g, func(err error) { errs <- err })
	if from := <-froms; from != nil {
		t.Fatalf("first subscribe from %v", from)
	}
	for v := range 3 {
		if m := recv(t, sub.C); m.Offset != int64(v) || string(m.Data) != string(dashState(v)) {
			t.Fatalf("offset %d: got %.80s", m.Offset, m.Data)
		}
	}
	select {
	case err := <-errs:
		if !errors.Is(err, client.ErrProtocol) {
			t.Fatalf("error %v, want ErrProtocol", err)
		}
	case <-time.After(wait):
		t.Fatal("no error for a delta without a base")
	}
	select {
	case from := <-froms:
		b, _ := json.Marshal(from)
		if !strings.Contains(string(b), `"offset":2`) {
			t.Fatalf("resubscribe from %s, want positions after offset 2", b)
		}
	case <-time.After(wait):
		t.Fatal("no resubscribe")
	}
	if m := recv(t, sub.C); m.Offset != 4 || string(m.Data) != string(dashState(4)) {
		t.Fatalf("after the resume: offset %d %.80s", m.Offset, m.Data)
	}
}

// deltaGateway is a fake gateway whose every connection is welcomed and
// sends one subscribe, to "dash": its "from" goes to froms, it is
// confirmed, and script plays the rest (n counts the connections from 1).
func deltaGateway(t *testing.T, froms chan<- any, script func(n int, fc *fakeConn, req map[string]any)) *fakeGateway {
	return newFakeGateway(t, func(n int, fc *fakeConn) {
		if !fc.welcome("e1") {
			return
		}
		req := fc.request()
		if req == nil {
			return
		}
		froms <- req["from"]
		fc.send(map[string]any{"op": "subscribed", "id": req["id"], "pattern": "dash"})
		script(n, fc, req)
	})
}

// dialDelta dials g, reconnecting within 20ms, with onError as its
// OnError, and subscribes to "dash" with Delta; the client closes when
// the test ends.
func dialDelta(t *testing.T, g *fakeGateway, onError func(error)) *client.Subscription {
	t.Helper()
	c, err := client.Dial(testCtx(t), g.URL, &client.Options{
		Reconnect: client.ReconnectPolicy{MinDelay: 10 * time.Millisecond, MaxDelay: 20 * time.Millisecond},
		OnError:   onError,
		OnGap:     func(client.Gap) {},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sub, err := c.SubscribeChan(testCtx(t), "dash", client.SubscribeOptions{Delta: true})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}
