package router_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// postRaw posts body to path and returns the status, the raw reply and
// its headers.
func (g *gateway) postRaw(t *testing.T, path, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest("POST", g.srv.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}

// TestHTTPPublishReplyBytes holds the single publish's reply as it was
// before the handler wrote it by hand: the bytes of echo's encoder for a
// map (keys in order, a newline after).
func TestHTTPPublishReplyBytes(t *testing.T) {
	g := newGateway(t)
	tests := []struct {
		name, body, want string
	}{
		{"first", `{"topic":"reply.a","data":1}`, `{"offset":0,"partition":0,"topic":"reply.a"}` + "\n"},
		{"second", `{"topic":"reply.a","data":{"x":[1,2]},"msg_id":"m1"}`, `{"offset":1,"partition":0,"topic":"reply.a"}` + "\n"},
		{"duplicate", `{"topic":"reply.a","data":2,"msg_id":"m1"}`, `{"duplicate":true,"offset":1,"partition":0,"topic":"reply.a"}` + "\n"},
		{"slow decoder (key case)", `{"TOPIC":"reply.b","data":1}`, `{"offset":0,"partition":0,"topic":"reply.b"}` + "\n"},
		{"pretty", `{"topic":"reply.a","data":3}`, "{\n  \"offset\": 2,\n  \"partition\": 0,\n  \"topic\": \"reply.a\"\n}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := "/v1/publish"
			if tt.name == "pretty" {
				path += "?pretty"
			}
			st, got, h := g.postRaw(t, path, tt.body)
			if st != 200 || got != tt.want {
				t.Fatalf("reply %d %q, want 200 %q", st, got, tt.want)
			}
			if ct := h.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

// TestHTTPPublishBatchDelivered: a batch's records, and a single
// publish, are delivered without waiting for the deferral's bound.
func TestHTTPPublishBatchDelivered(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Session.MaxDeferredWake = time.Hour })
	sub := g.dial(t)
	sub.subscribe(t, "wake")
	if st, body, _ := g.postRaw(t, "/v1/publish", `{"records":[{"topic":"wake","data":1},{"topic":"wake","data":2}]}`); st != 200 {
		t.Fatalf("batch: %d %s", st, body)
	}
	if st, body, _ := g.postRaw(t, "/v1/publish", `{"topic":"wake","data":3}`); st != 200 {
		t.Fatalf("single: %d %s", st, body)
	}
	for want := 1; want <= 3; want++ {
		if f := sub.nextOp(t, "message"); f["data"] != float64(want) {
			t.Fatalf("delivered %v, want data %d", f, want)
		}
	}
}

// TestHTTPPublishBatch publishes a batch with good and bad records: one
// result per record in request order, the good records stored and
// delivered in order, each msg_id idempotent on its own.
func TestHTTPPublishBatch(t *testing.T) {
	g := newGateway(t)
	sub := g.dial(t)
	sub.subscribe(t, "batch.#")
	body := `{"records":[
		{"topic":"batch.a","data":{"n":0},"key":"k"},
		{"topic":"batch..bad","data":1},
		{"topic":"batch.a","data":{"n":1},"key":"k","msg_id":"id-1"},
		{"topic":"$sys.x","data":1},
		7,
		{"topic":"batch.b","data":"AAEC","encoding":"base64","headers":{"h":"v"}},
		{"topic":"batch.a","data":{"n":2},"key":"k","priority":9},
		{"topic":"batch.a"}
	]}`
	st, m, _ := g.httpDo(t, "POST", "/v1/publish", body)
	if st != 200 {
		t.Fatalf("batch: %d %v", st, m)
	}
	res, _ := m["results"].([]any)
	want := []string{"ok 0", "invalid_topic", "ok 1", "forbidden", "bad_request", "ok 0", "bad_request", "bad_request"}
	if len(res) != len(want) {
		t.Fatalf("results %v, want %d", res, len(want))
	}
	for i, r := range res {
		r := r.(map[string]any)
		got := fmt.Sprint(r["code"])
		if _, ok := r["offset"]; ok {
			got = fmt.Sprintf("ok %d", num(r, "offset"))
			if r["topic"] == nil || r["partition"] == nil || r["duplicate"] != nil {
				t.Errorf("result %d: %v", i, r)
			}
		} else if r["message"] == "" || r["message"] == nil {
			t.Errorf("result %d has no message: %v", i, r)
		}
		if got != want[i] {
			t.Errorf("result %d = %s (%v), want %s", i, got, r, want[i])
		}
	}
	for _, w := range []string{`{"n":0}`, `{"n":1}`, `"AAEC"`} {
		f := sub.nextOp(t, "message")
		if got := mustJSON(t, f["data"]); got != w {
			t.Fatalf("delivered %v, want data %s", f, w)
		}
	}
	// The same msg_id again, in a batch and alone: the first offset, a
	// duplicate, nothing stored.
	st, m, _ = g.httpDo(t, "POST", "/v1/publish", `{"records":[{"topic":"batch.a","data":5,"msg_id":"id-1"},{"topic":"batch.a","data":6,"msg_id":"id-2"}]}`)
	res, _ = m["results"].([]any)
	if st != 200 || len(res) != 2 {
		t.Fatalf("repeat: %d %v", st, m)
	}
	if r := res[0].(map[string]any); r["duplicate"] != true || num(r, "offset") != 1 {
		t.Fatalf("repeat of id-1: %v", r)
	}
	if r := res[1].(map[string]any); r["duplicate"] != nil || num(r, "offset") != 2 {
		t.Fatalf("id-2: %v", r)
	}
	if st, m, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "batch.a", "data": 7, "msg_id": "id-2"}); st != 200 || m["duplicate"] != true || num(m, "offset") != 2 {
		t.Fatalf("single repeat of id-2: %d %v", st, m)
	}
	if f := sub.nextOp(t, "message"); num(f, "offset") != 2 || f["topic"] != "batch.a" {
		t.Fatalf("delivered %v, want batch.a offset 2", f)
	}
	sub.noFrame(t)
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestHTTPPublishBatchOrder publishes batches of records with one key
// concurrently with single publishes of another: each key's records are
// stored in request order, and every record reaches the subscriber.
func TestHTTPPublishBatchOrder(t *testing.T) {
	g := newGateway(t)
	if st, m, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "order", "partitions": 4}); st != 201 {
		t.Fatalf("create: %d %v", st, m)
	}
	sub := g.dial(t)
	sub.subscribe(t, "order")
	const batches, per, singles = 5, 40, 60
	var wg sync.WaitGroup
	errs := make(chan string, batches+singles)
	wg.Add(2)
	go func() {
		defer wg.Done()
		for b := range batches {
			var sb strings.Builder
			sb.WriteString(`{"records":[`)
			for i := range per {
				if i > 0 {
					sb.WriteByte(',')
				}
				fmt.Fprintf(&sb, `{"topic":"order","key":"batch","data":%d}`, b*per+i)
			}
			sb.WriteString(`]}`)
			st, body, _ := g.postRaw(t, "/v1/publish", sb.String())
			if st != 200 || strings.Count(body, `"offset"`) != per {
				errs <- fmt.Sprintf("batch %d: %d %s", b, st, body)
			}
		}
	}()
	go func() {
		defer wg.Done()
		for i := range singles {
			st, body, _ := g.postRaw(t, "/v1/publish", fmt.Sprintf(`{"topic":"order","key":"single","data":%d}`, i))
			if st != 200 {
				errs <- fmt.Sprintf("single %d: %d %s", i, st, body)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	next := map[string]int{}
	for range batches*per + singles {
		f := sub.nextOp(t, "message")
		key, _ := f["key"].(string)
		if n := int(f["data"].(float64)); n != next[key] {
			t.Fatalf("key %s: data %d, want %d", key, n, next[key])
		}
		next[key]++
	}
	if next["batch"] != batches*per || next["single"] != singles {
		t.Fatalf("delivered %v", next)
	}
}

// TestHTTPPublishBatchBounds refuses bodies past the batch bounds or of
// the wrong shape as a whole, counting the bounds, with nothing stored.
func TestHTTPPublishBatchBounds(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.MaxPublishBatch = 3
		c.router.MaxPublishBatchBytes = 4 << 10
		c.router.MaxBodyBytes = 3 << 10
	})
	rec := `{"topic":"bounds","data":1}`
	big := `{"topic":"bounds","data":"` + strings.Repeat("x", 3<<10) + `"}`
	tests := []struct {
		name, body string
		status     int
		code, msg  string
	}{
		{"empty", `{"records":[]}`, 400, "bad_request", `"records" must list 1 to 3 records`},
		{"too many", `{"records":[` + strings.Repeat(rec+",", 3) + rec + `]}`, 400, "bad_request", "a batch publish has 4 records; the limit is 3"},
		{"not an array", `{"records":{"topic":"bounds"}}`, 400, "bad_request", `"records" must be an array`},
		{"with a record's fields", `{"topic":"bounds","data":1,"records":[` + rec + `]}`, 400, "bad_request", `a batch publish takes only "records"`},
		{"body too large", `{"records":[` + big + `,` + big + `]}`, 413, "message_too_large", "batch publish body is larger than 4096 bytes"},
		{"single body too large", big, 413, "message_too_large", "request body is larger than 3072 bytes"},
		{"single over the batch bound", big + strings.Repeat(" ", 2<<10), 413, "message_too_large", "request body is larger than 3072 bytes"},
		{"not JSON", `{"records":[`, 400, "bad_request", "body is not valid JSON"},
		{"not an object", `[1]`, 400, "bad_request", "body must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st, m, _ := g.httpDo(t, "POST", "/v1/publish", tt.body)
			if st != tt.status || m["code"] != tt.code || !strings.Contains(fmt.Sprint(m["message"]), tt.msg) {
				t.Fatalf("reply %d %v, want %d %s %q", st, m, tt.status, tt.code, tt.msg)
			}
		})
	}
	// A batch over the single body bound, within its own, is served.
	st, body, _ := g.postRaw(t, "/v1/publish", `{"records":[`+big+`]}`)
	if st != 200 || !strings.Contains(body, `"offset":0`) {
		t.Fatalf("batch of one large record: %d %s", st, body)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "publish_batch_records"}); got != 1 {
		t.Errorf("limit_rejections_total{limit=publish_batch_records} = %v", got)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "publish_batch_bytes"}); got != 1 {
		t.Errorf("limit_rejections_total{limit=publish_batch_bytes} = %v", got)
	}
	if st, m, _ := g.httpDo(t, "GET", "/v1/topics/bounds", nil); st != 200 || !bytes.Contains([]byte(fmt.Sprint(m["offsets"])), []byte("next:1")) {
		t.Fatalf("topic after the refusals: %d %v (want one record)", st, m)
	}
}

// TestHTTPPublishBatchRateLimit counts each record against the client's
// HTTP publish rate: the records past it are refused with rate_limited,
// the reply says when to retry, the others are stored.
func TestHTTPPublishBatchRateLimit(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.HTTPPublishRate = 0.001 // a burst of one
	})
	rec := `{"topic":"rl","data":1}`
	st, m, h := g.httpDo(t, "POST", "/v1/publish", `{"records":[`+rec+`,`+rec+`,`+rec+`]}`)
	res, _ := m["results"].([]any)
	if st != 200 || len(res) != 3 || h.Get("Retry-After") == "" {
		t.Fatalf("batch: %d %v %v", st, m, h)
	}
	for i, want := range []string{"<nil>", "rate_limited", "rate_limited"} {
		if got := fmt.Sprint(res[i].(map[string]any)["code"]); got != want {
			t.Errorf("result %d: %v, want code %s", i, res[i], want)
		}
	}
}

// TestHTTPPublishesOverlapDelivered publishes from several connections
// at once (their fan-out shares one deferral, flushed by the last
// publish in flight): every record reaches every subscriber. The
// deferral's bound is an hour, so only the flushes of the publishes
// themselves can wake the subscribers' writers: a publish whose wake were
// left to the bound would hang the test.
func TestHTTPPublishesOverlapDelivered(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.Session.MaxDeferredWake = time.Hour })
	subs := []*client{g.dial(t), g.dial(t), g.dial(t)}
	for _, s := range subs {
		s.subscribe(t, "overlap.*")
	}
	const conns, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan string, conns*each)
	for c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				st, body, _ := g.postRaw(t, "/v1/publish", fmt.Sprintf(`{"topic":"overlap.c%d","data":%d}`, c, i))
				if st != 200 {
					errs <- body
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for _, s := range subs {
		for range conns * each {
			s.nextOp(t, "message")
		}
		s.noFrame(t)
	}
}

var _ = router.DefaultMaxPublishBatch
