package router_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// legacySSEToken builds an id of the earlier self-contained form: pattern
// → topic → offsets of partition 0.
func legacySSEToken(epoch string, pos map[string]map[string]int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"e":%q,"s":[`, epoch)
	first := true
	for p, parts := range pos {
		if !first {
			b.WriteByte(',')
		}
		first = false
		fmt.Fprintf(&b, `{"p":%q,"o":[`, p)
		i := 0
		for topic, off := range parts {
			if i > 0 {
				b.WriteByte(',')
			}
			i++
			fmt.Fprintf(&b, `[%q,0,%d]`, topic, off)
		}
		b.WriteString("]}")
	}
	b.WriteString("]}")
	return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
}

// TestSSEEventIDsStaySmallOverManyPartitions streams the last record of
// many topics through one wildcard: every id is short and the next number
// of the stream, whatever the partitions seen; a reconnect naming an id
// from the middle gets exactly the records after it.
func TestSSEEventIDsStaySmallOverManyPartitions(t *testing.T) {
	const topics = 300
	g := newGateway(t)
	ctx := context.Background()
	for i := range topics {
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: "w." + strconv.Itoa(i), Data: []byte(`"x"`)}); err != nil {
			t.Fatal(err)
		}
	}
	path := "/v1/sse?pattern=w.%23&from=last"
	s, _ := openSSE(t, g.srv.URL, path, nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	ids := make([]string, 0, topics)
	seen := map[string]bool{}
	for range topics {
		ev := s.nextEvent(t, "message")
		if len(ev.id) > 40 {
			t.Fatalf("event %d has an id of %d bytes: %.60s…", len(ids)+1, len(ev.id), ev.id)
		}
		if len(ids) > 0 {
			prev, cur := ids[len(ids)-1], ev.id
			pi, ci := strings.LastIndexByte(prev, '.'), strings.LastIndexByte(cur, '.')
			pn, _ := strconv.Atoi(prev[pi+1:])
			cn, _ := strconv.Atoi(cur[ci+1:])
			if pi < 0 || ci < 0 || prev[:pi] != cur[:ci] || cn != pn+1 {
				t.Fatalf("id %q follows %q: want the stream's next number", cur, prev)
			}
		}
		ids = append(ids, ev.id)
		topic, _ := ev.frame["topic"].(string)
		if topic == "" {
			t.Fatalf("event %q %q %q", ev.event, ev.id, ev.data)
		}
		seen[topic] = true
	}
	if len(seen) != topics {
		t.Fatalf("got %d topics, want %d", len(seen), topics)
	}
	s.close()
	// Resume after the 100th event: the other 200 topics' records again,
	// and nothing of the first 100.
	s2, _ := openSSE(t, g.srv.URL, path+"&last_event_id="+url.QueryEscape(ids[99]), nil)
	s2.nextEvent(t, "welcome")
	if ev := s2.nextEvent(t, "subscribed"); ev.frame["recovered"] != true {
		t.Fatalf("resume: %s", ev.data)
	}
	again := map[string]bool{}
	for range topics - 100 {
		ev := s2.nextEvent(t, "message")
		again[ev.frame["topic"].(string)] = true
	}
	if _, err := g.rt.Publish(ctx, engine.Message{Topic: "w.0", Data: []byte(`"y"`)}); err != nil {
		t.Fatal(err)
	}
	if ev := s2.nextEvent(t, "message"); ev.frame["topic"] != "w.0" || num(ev.frame, "offset") != 1 {
		t.Fatalf("after the replay got %s, want w.0's new record", ev.data)
	}
	if len(again) != topics-100 {
		t.Fatalf("resume replayed %d topics, want %d", len(again), topics-100)
	}
}

// TestSSERefusesForgedLastEventID: a Last-Event-ID naming patterns the
// stream does not request, more positions or more bytes than the bounds
// allow is refused with 400 before the stream starts.
func TestSSERefusesForgedLastEventID(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) {
		c.router.SSE.MaxPositions = 4
		c.router.SSE.MaxTokenBytes = 512
	})
	epoch := g.eng.Epoch()
	many := map[string]int64{}
	for i := range 5 {
		many["a."+strconv.Itoa(i)] = 0
	}
	long := map[string]int64{}
	for i := range 3 {
		long["a."+strings.Repeat("x", 200)+strconv.Itoa(i)] = 0
	}
	for _, tc := range []struct {
		name, tok string
	}{
		{"pattern not requested", legacySSEToken(epoch, map[string]map[string]int64{"other.#": {"other.x": 0}})},
		{"too many positions", legacySSEToken(epoch, map[string]map[string]int64{"a.*": many})},
		{"too long", legacySSEToken(epoch, map[string]map[string]int64{"a.*": long})},
		{"not a token", "%%"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := sseRefused(t, g.srv.URL, "/v1/sse?pattern=a.*&last_event_id="+url.QueryEscape(tc.tok))
			if status != http.StatusBadRequest {
				t.Fatalf("status %d %v, want 400", status, body)
			}
		})
	}
	if v := metricValue(t, g.reg, "switchyard_sse_resumes_total", map[string]string{"outcome": "refused"}); v != 4 {
		t.Fatalf("refused resumes %v, want 4", v)
	}
	// Within the bounds, a token of the earlier form still resumes.
	if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: "a.0", Data: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	tok := legacySSEToken(epoch, map[string]map[string]int64{"a.*": {"a.0": 0}})
	s, status := openSSE(t, g.srv.URL, "/v1/sse?pattern=a.*", http.Header{"Last-Event-ID": {tok}})
	if s == nil {
		t.Fatalf("status %d", status)
	}
	s.nextEvent(t, "welcome")
	if ev := s.nextEvent(t, "subscribed"); ev.frame["recovered"] != true {
		t.Fatalf("got %s", ev.data)
	}
}

// TestSSERefusesLastPastMaxLast: from={"last":N} past the bound is a 400,
// as the protocol says, not a stream without its subscription.
func TestSSERefusesLastPastMaxLast(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.MaxLast = 10 })
	status, body := sseRefused(t, g.srv.URL, "/v1/sse?pattern=a&from="+url.QueryEscape(`{"last":11}`))
	if status != http.StatusBadRequest {
		t.Fatalf("status %d %v, want 400", status, body)
	}
}

// TestSSEResumeOfUnknownStream: an id naming a stream the gateway does
// not know (expired, or another process's) resumes from the earliest
// records, not recovered, as a token from another epoch does.
func TestSSEResumeOfUnknownStream(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	for i := range 2 {
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: "u", Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=u", http.Header{"Last-Event-ID": {"0123456789abcdef.7"}})
	s.nextEvent(t, "welcome")
	if ev := s.nextEvent(t, "subscribed"); ev.frame["recovered"] != false {
		t.Fatalf("got %s, want recovered false", ev.data)
	}
	for i := range 2 {
		if ev := s.nextEvent(t, "message"); num(ev.frame, "offset") != int64(i) {
			t.Fatalf("got %s, want offset %d", ev.data, i)
		}
	}
}

// TestSSEPositionsPastTheBound: a stream over more partitions than it
// keeps positions for still gives every event an id; a resume replays
// the partitions past the bound from their earliest records, and resumes
// the others exactly.
func TestSSEPositionsPastTheBound(t *testing.T) {
	const kept, topics = 3, 5
	g := newGateway(t, func(c *gwConfig) { c.router.SSE.MaxPositions = kept })
	ctx := context.Background()
	publish := func(topic string) {
		t.Helper()
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: topic, Data: []byte(`1`)}); err != nil {
			t.Fatal(err)
		}
	}
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=p.*", nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	var last string
	order := make([]string, 0, topics)
	for i := range topics {
		publish("p." + strconv.Itoa(i))
		ev := s.nextEvent(t, "message")
		if ev.id == "" || ev.id == last {
			t.Fatalf("event %d: id %q after %q", i, ev.id, last)
		}
		last = ev.id
		order = append(order, ev.frame["topic"].(string))
	}
	if v := metricValue(t, g.reg, "switchyard_sse_untracked_deliveries_total", nil); v != topics-kept {
		t.Fatalf("untracked deliveries %v, want %d", v, topics-kept)
	}
	s.close()
	s2, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=p.*", http.Header{"Last-Event-ID": {last}})
	s2.nextEvent(t, "welcome")
	s2.nextEvent(t, "subscribed")
	// The partitions past the bound come again; the kept ones do not.
	again := map[string]bool{}
	for range topics - kept {
		again[s2.nextEvent(t, "message").frame["topic"].(string)] = true
	}
	publish("p.0")
	if ev := s2.nextEvent(t, "message"); ev.frame["topic"] != "p.0" || num(ev.frame, "offset") != 1 {
		t.Fatalf("got %s, want p.0's new record", ev.data)
	}
	for _, topic := range order[kept:] {
		if !again[topic] {
			t.Fatalf("replayed %v, want %v", again, order[kept:])
		}
	}
}

// TestSSEResumeStateBound: an ended stream's positions are kept within
// the byte bound and for the TTL only; past either a reconnect resumes as
// an unknown stream does, and the kept bytes stay within the bound.
func TestSSEResumeStateBound(t *testing.T) {
	for _, tc := range []struct {
		name      string
		bytes     int64
		ttl       time.Duration
		recovered bool
	}{
		{"within", 1 << 20, time.Hour, true},
		{"past the bytes", 1, time.Hour, false},
		{"past the TTL", 1 << 20, time.Nanosecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) {
				c.router.SSE.ResumeBytes = tc.bytes
				c.router.SSE.ResumeTTL = tc.ttl
			})
			if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: "r", Data: []byte(`1`)}); err != nil {
				t.Fatal(err)
			}
			s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=r&from=earliest", nil)
			s.nextEvent(t, "welcome")
			s.nextEvent(t, "subscribed")
			id := s.nextEvent(t, "message").id
			s.close()
			waitUntil(t, "the stream to end", func() bool {
				return metricValue(t, g.reg, "switchyard_connections", nil) == 0
			})
			if v := metricValue(t, g.reg, "switchyard_sse_resume_bytes", nil); v > float64(tc.bytes) {
				t.Fatalf("kept %v bytes, bound %d", v, tc.bytes)
			}
			s2, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=r", http.Header{"Last-Event-ID": {id}})
			s2.nextEvent(t, "welcome")
			if ev := s2.nextEvent(t, "subscribed"); ev.frame["recovered"] != tc.recovered {
				t.Fatalf("got %s, want recovered %v", ev.data, tc.recovered)
			}
		})
	}
}
