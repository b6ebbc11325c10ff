package web_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/switchyard/switchyard/engine"
)

// browserStrings evaluates expr (a JSON.stringify of a string array) in
// the page.
func browserStrings(t *testing.T, ctx context.Context, expr string) []string {
	t.Helper()
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	if err := json.Unmarshal([]byte(raw), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestBrowserEventSourceResumes: a plain EventSource on /v1/sse receives,
// loses its connection while records are appended, reconnects by itself
// with Last-Event-ID and gets every record once, in order.
func TestBrowserEventSourceResumes(t *testing.T) {
	ctx := browser(t)
	srv, cut, eng := newWebGateway(t, -1)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/example.html")); err != nil {
		t.Fatal(err)
	}
	setup := `(() => {
		window.got = [];
		window.events = [];
		const es = new EventSource("/v1/sse?pattern=feed.*&from=earliest");
		es.onmessage = (ev) => { const m = JSON.parse(ev.data); got.push(m.topic + "/" + m.offset + "/" + m.data.n); };
		es.addEventListener("subscribed", (ev) => events.push("subscribed:" + JSON.parse(ev.data).recovered));
		es.addEventListener("gap", () => events.push("gap"));
		es.onerror = () => events.push("error");
		window.es = es;
		return true;
	})()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](setup)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	appendN := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := eng.Append(context.Background(), engine.Message{Topic: "feed.a", Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(0, 5)
	evalUntil(t, ctx, `got.length >= 5`, "the first five records")
	cut.cut(true)
	evalUntil(t, ctx, `events.includes("error")`, "the browser noticing the drop")
	appendN(5, 10)
	cut.cut(false)
	evalUntil(t, ctx, `got.length >= 10`, "the records appended while disconnected")
	appendN(10, 11) // a barrier: anything repeated would arrive before it
	evalUntil(t, ctx, `got.length >= 11`, "a record after the resume")
	got := browserStrings(t, ctx, `JSON.stringify(got)`)
	if len(got) != 11 {
		t.Fatalf("got %d records, want 11 exactly once: %v", len(got), got)
	}
	for i, g := range got {
		if want := "feed.a/" + strconv.Itoa(i) + "/" + strconv.Itoa(i); g != want {
			t.Fatalf("record %d = %q, want %q (in order, once)", i, g, want)
		}
	}
	events := browserStrings(t, ctx, `JSON.stringify(events)`)
	resumed := false
	for _, e := range events {
		if e == "gap" {
			t.Fatalf("unexpected gap: %v", events)
		}
		resumed = resumed || e == "subscribed:true"
	}
	if !resumed {
		t.Fatalf("the reconnect did not resume from its position: %v", events)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`es.close(), true`)); err != nil {
		t.Fatal(err)
	}
}

// TestBrowserClientFallsBackToSSE: the JS client, given a WebSocket that
// cannot be opened, falls back to Server-Sent Events and HTTP publish with
// the same API; across a dropped connection it delivers every record once.
func TestBrowserClientFallsBackToSSE(t *testing.T) {
	ctx := browser(t)
	srv, cut, eng := newWebGateway(t, -1)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/example.html")); err != nil {
		t.Fatal(err)
	}
	setup := `(async () => {
		const { connect } = await import("/switchyard.js");
		// A WebSocket that a proxy refuses: it closes before it opens.
		class Refused {
			constructor() { this.readyState = 0; setTimeout(() => this.onclose && this.onclose({ code: 1006, reason: "refused" }), 0); }
			send() {}
			close() {}
		}
		window.got = [];
		window.events = [];
		const c = await connect("ws://" + location.host + "/v1/ws", { WebSocket: Refused, reconnect: { minDelayMs: 50, maxDelayMs: 200 } });
		c.on("transport", (ev) => events.push("transport:" + ev.transport));
		await c.subscribe("fall.*", (m) => got.push(m.topic + "/" + m.offset + "/" + m.data.n), { from: "earliest" });
		const r = await c.publish("fall.a", { n: 0 });
		window.sy = c;
		return c.transport === "sse" && r.offset === 0;
	})()`
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](setup, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("setup: %v", err)
	}
	if !ok {
		t.Fatal("the client did not publish over SSE's HTTP fallback")
	}
	appendN := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := eng.Append(context.Background(), engine.Message{Topic: "fall.a", Data: []byte(fmt.Sprintf(`{"n":%d}`, i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	appendN(1, 5)
	evalUntil(t, ctx, `got.length >= 5`, "the first five records")
	cut.cut(true)
	appendN(5, 10)
	cut.cut(false)
	evalUntil(t, ctx, `got.length >= 10`, "the records appended while disconnected")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sy.publish("fall.a", { n: 10 }).then(() => true)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, `got.length >= 11`, "a record after the resume")
	got := browserStrings(t, ctx, `JSON.stringify(got)`)
	if len(got) != 11 {
		t.Fatalf("got %d records, want 11 exactly once: %v", len(got), got)
	}
	for i, g := range got {
		if want := "fall.a/" + strconv.Itoa(i) + "/" + strconv.Itoa(i); g != want {
			t.Fatalf("record %d = %q, want %q (in order, once)", i, g, want)
		}
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sy.close(), true`)); err != nil {
		t.Fatal(err)
	}
}
