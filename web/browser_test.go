package web_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

func TestBrowserDashboardShowsLiveRates(t *testing.T) {
	ctx := browser(t)
	srv, _, _ := newWebGateway(t, 200*time.Millisecond)
	navigate(t, ctx, srv.URL+"/")
	evalUntil(t, ctx, `document.getElementById("conn-state").dataset.state === "open"`, "dashboard connected")
	screenshot := os.Getenv("SWITCHYARD_SCREENSHOT")
	if screenshot != "" {
		screenshotLoad(t, srv)
	}
	// Publish steadily until the dashboard shows a publish rate.
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		client := srv.Client()
		for i := 0; i < 20000; i++ {
			select {
			case <-stop:
				return
			default:
			}
			resp, err := client.Post(srv.URL+"/v1/publish", "application/json",
				strings.NewReader(fmt.Sprintf(`{"topic":"shop.orders.eu","key":"k%d","data":{"n":%d}}`, i%7, i)))
			if err != nil {
				return
			}
			resp.Body.Close()
			time.Sleep(2 * time.Millisecond) // a steady, visible rate
		}
	}()
	evalUntil(t, ctx, `Number(document.getElementById("rate-publishes").textContent) > 0`, "a live publish rate")
	evalUntil(t, ctx, `document.getElementById("top-topics").textContent.includes("shop.orders.eu")`, "top topics")
	if out := screenshot; out != "" {
		time.Sleep(20 * time.Second) // let the charts fill
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(out, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	<-done
}

// screenshotLoad gives the dashboard something to show when the test takes
// the README's screenshot: forty WebSocket subscribers, a two-member
// consumer group that acks, and a second publisher. Everything stops when
// the test ends.
func screenshotLoad(t *testing.T, srv *httptest.Server) {
	t.Helper()
	wsURL := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	if resp, err := srv.Client().Post(srv.URL+"/v1/topics", "application/json",
		strings.NewReader(`{"name":"shop.payments.us","partitions":4}`)); err == nil {
		resp.Body.Close()
	}
	dial := func(sub map[string]any, ack bool) {
		conn, _, err := websocket.Dial(ctx, wsURL, nil)
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		data, _ := json.Marshal(sub)
		if err := conn.Write(ctx, websocket.MessageText, data); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.CloseNow()
			for {
				_, frame, err := conn.Read(ctx)
				if err != nil {
					return
				}
				if !ack {
					continue
				}
				for _, line := range bytes.Split(frame, []byte("\n")) {
					var m map[string]any
					if json.Unmarshal(line, &m) != nil || m["op"] != "message" {
						continue
					}
					reply, _ := json.Marshal(map[string]any{"op": "ack", "group": m["group"], "topic": m["topic"], "partition": m["partition"], "offset": m["offset"]})
					if conn.Write(ctx, websocket.MessageText, reply) != nil {
						return
					}
				}
			}
		}()
	}
	for i := range 40 {
		pattern := "shop.#"
		if i%2 == 1 {
			pattern = "shop.*.eu"
		}
		dial(map[string]any{"op": "subscribe", "pattern": pattern}, false)
	}
	for range 2 {
		dial(map[string]any{"op": "subscribe", "pattern": "shop.payments.*", "group": "billing"}, true)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < 100000; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			resp, err := srv.Client().Post(srv.URL+"/v1/publish", "application/json",
				strings.NewReader(fmt.Sprintf(`{"topic":"shop.payments.us","key":"c%d","data":{"amount":%d}}`, i%13, i)))
			if err != nil {
				return
			}
			resp.Body.Close()
		}
	}()
}

func TestBrowserClientRecoversAfterOutage(t *testing.T) {
	ctx := browser(t)
	srv, cut, eng := newWebGateway(t, -1)
	navigate(t, ctx, srv.URL+"/example.html")
	setup := `(async () => {
		const { connect } = await import("/switchyard.js");
		window.got = [];
		window.events = [];
		const c = await connect("ws://" + location.host + "/v1/ws", { reconnect: { minDelayMs: 50, maxDelayMs: 200 } });
		c.on("reconnect", () => events.push("reconnect"));
		c.on("open", () => events.push("open"));
		c.on("reset", () => events.push("reset"));
		await c.subscribe("outage.*", (m) => got.push(m.topic + "/" + m.offset + "/" + m.data.n));
		window.sy = c;
		return true;
	})()`
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](setup, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatalf("setup: %v", err)
	}
	publish := func(n int) {
		t.Helper()
		resp, err := srv.Client().Post(srv.URL+"/v1/publish", "application/json",
			strings.NewReader(fmt.Sprintf(`{"topic":"outage.a","data":{"n":%d}}`, n)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("publish %d: %d", n, resp.StatusCode)
		}
	}
	for i := range 5 {
		publish(i)
	}
	evalUntil(t, ctx, `got.length >= 5`, "the first five messages")
	// Outage: drop the browser's connection and refuse its reconnects
	// while more is appended to the log, then let it back in.
	cut.cut(true)
	evalUntil(t, ctx, `events.includes("reconnect")`, "the client noticing the outage")
	appendNumbers(t, eng, "outage.a", 5, 10)
	cut.cut(false)
	evalUntil(t, ctx, `got.length >= 10`, "messages published during the outage")
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]byte](`JSON.stringify({got, events})`))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	var res struct {
		Got    []string `json:"got"`
		Events []string `json:"events"`
	}
	if err := json.Unmarshal([]byte(s), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Got) != 10 {
		t.Fatalf("got %d messages, want 10 exactly once: %v", len(res.Got), res.Got)
	}
	for i, g := range res.Got {
		if want := "outage.a/" + strconv.Itoa(i) + "/" + strconv.Itoa(i); g != want {
			t.Fatalf("message %d = %q, want %q (in order, once)", i, g, want)
		}
	}
	for _, e := range res.Events {
		if e == "reset" {
			t.Fatalf("resume was not recovered: %v", res.Events)
		}
	}
}

// TestBrowserDashboardPagesTopics: the dashboard lists topics a page at a
// time from GET /v1/topics, pages on with the cursor, and shows the totals
// of the $sys.topics summary.
func TestBrowserDashboardPagesTopics(t *testing.T) {
	ctx := browser(t)
	srv, _, eng := newWebGateway(t, 20*time.Millisecond)
	for i := range 120 {
		if _, err := eng.CreateTopic(context.Background(), engine.TopicConfig{Name: fmt.Sprintf("page.t%03d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	navigate(t, ctx, srv.URL+"/")
	evalUntil(t, ctx, `document.querySelectorAll("#topics tbody tr").length === 50 && !document.getElementById("topics-next").disabled`, "a first page of 50 topics")
	evalUntil(t, ctx, `document.getElementById("topics-status").textContent.includes("topics")`, "the summary's totals")
	// Page 1 is the $sys topics and page.t000 to page.t046, in name order.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`document.getElementById("topics-next").click()`)); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, `document.querySelector("#topics tbody tr td").textContent === "page.t047" && !document.getElementById("topics-prev").disabled`, "the second page")
}

// TestBrowserDashboardShowsTopicPolicy: a topic a publish created under a
// topic policy of the config file shows that policy in the topics card.
func TestBrowserDashboardShowsTopicPolicy(t *testing.T) {
	ctx := browser(t)
	srv, _, _ := newWebGateway(t, 20*time.Millisecond,
		router.TopicPolicy{Pattern: "metrics.#", Config: engine.TopicConfig{Partitions: 2, MaxMessages: 500}})
	resp, err := http.Post(srv.URL+"/v1/publish", "application/json", strings.NewReader(`{"topic":"metrics.cpu","data":1}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("publish: %s", resp.Status)
	}
	navigate(t, ctx, srv.URL+"/")
	evalUntil(t, ctx, `Array.from(document.querySelectorAll("#topics tbody tr")).some((tr) => tr.textContent.includes("metrics.cpu") && tr.textContent.includes("policy metrics.#"))`,
		"the topic's row naming its policy")
}
