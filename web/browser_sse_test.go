package web_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/chromedp/chromedp"
)

// TestBrowserEventSourceResumes: a plain EventSource on /v1/sse receives,
// loses its connection while records are appended, reconnects by itself
// with Last-Event-ID and gets every record once, in order.
func TestBrowserEventSourceResumes(t *testing.T) {
	ctx := browser(t)
	srv, cut, eng := newWebGateway(t, -1)
	navigate(t, ctx, srv.URL+"/example.html")
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
	appendNumbers(t, eng, "feed.a", 0, 5)
	evalUntil(t, ctx, `got.length >= 5`, "the first five records")
	cut.cut(true)
	evalUntil(t, ctx, `events.includes("error")`, "the browser noticing the drop")
	appendNumbers(t, eng, "feed.a", 5, 10)
	cut.cut(false)
	evalUntil(t, ctx, `got.length >= 10`, "the records appended while disconnected")
	appendNumbers(t, eng, "feed.a", 10, 11) // a barrier: anything repeated would arrive before it
	evalUntil(t, ctx, `got.length >= 11`, "a record after the resume")
	gotInOrder(t, ctx, "feed.a", 11)
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
	navigate(t, ctx, srv.URL+"/example.html")
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
	appendNumbers(t, eng, "fall.a", 1, 5)
	evalUntil(t, ctx, `got.length >= 5`, "the first five records")
	cut.cut(true)
	appendNumbers(t, eng, "fall.a", 5, 10)
	cut.cut(false)
	evalUntil(t, ctx, `got.length >= 10`, "the records appended while disconnected")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sy.publish("fall.a", { n: 10 }).then(() => true)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, `got.length >= 11`, "a record after the resume")
	gotInOrder(t, ctx, "fall.a", 11)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`sy.close(), true`)); err != nil {
		t.Fatal(err)
	}
}

// gotInOrder checks that the page's got lists the records of topic with
// offsets 0 to n-1, as "topic/offset/n" (n equal to the offset), each once
// and in order.
func gotInOrder(t *testing.T, ctx context.Context, topic string, n int) {
	t.Helper()
	got := browserStrings(t, ctx, `JSON.stringify(got)`)
	if len(got) != n {
		t.Fatalf("got %d records, want %d exactly once: %v", len(got), n, got)
	}
	for i, g := range got {
		if want := topic + "/" + strconv.Itoa(i) + "/" + strconv.Itoa(i); g != want {
			t.Fatalf("record %d = %q, want %q (in order, once)", i, g, want)
		}
	}
}
