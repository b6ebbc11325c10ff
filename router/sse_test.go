package router_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// sseEvent is one parsed Server-Sent Event (or a comment, with only
// comment set).
type sseEvent struct {
	event, id, data, comment string
	frame                    map[string]any
}

type sseStream struct {
	resp   *http.Response
	events chan sseEvent
	done   chan struct{}
}

// openSSE starts GET path with header h and parses its events on a
// goroutine until the body ends; the test's cleanup closes it.
func openSSE(t *testing.T, base, path string, h http.Header) (*sseStream, int) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range h {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, resp.StatusCode
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	s := &sseStream{resp: resp, events: make(chan sseEvent, 1<<14), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		rd := bufio.NewReader(resp.Body)
		var ev sseEvent
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimSuffix(line, "\n")
			switch {
			case line == "":
				if ev.data != "" || ev.event != "" || ev.id != "" {
					if ev.event == "" {
						ev.event = "message"
					}
					_ = json.Unmarshal([]byte(ev.data), &ev.frame)
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, ":"):
				s.events <- sseEvent{comment: strings.TrimSpace(line[1:])}
			default:
				k, v, _ := strings.Cut(line, ":")
				v = strings.TrimPrefix(v, " ")
				switch k {
				case "event":
					ev.event = v
				case "id":
					ev.id = v
				case "data":
					ev.data = v
				}
			}
		}
	}()
	t.Cleanup(s.close)
	return s, resp.StatusCode
}

func (s *sseStream) close() {
	s.resp.Body.Close()
	<-s.done
}

// next returns the next event that is not a comment.
func (s *sseStream) next(t *testing.T) sseEvent {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-s.events:
			if ev.comment != "" {
				continue
			}
			return ev
		case <-deadline:
			t.Fatalf("no event within %v", waitTimeout)
		}
	}
}

func (s *sseStream) nextEvent(t *testing.T, name string) sseEvent {
	t.Helper()
	ev := s.next(t)
	if ev.event != name {
		t.Fatalf("got event %q %s, want %q", ev.event, ev.data, name)
	}
	return ev
}

// TestSSEResume streams two patterns, drops the connection, appends more,
// and reconnects with Last-Event-ID: every record arrives once, in order per
// partition, and the resumed subscriptions are recovered.
func TestSSEResume(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	publish := func(topic string, i int) {
		if _, err := g.rt.Publish(ctx, engine.Message{Topic: topic, Data: []byte(strconv.Itoa(i))}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		publish("a.x", i)
	}
	path := "/v1/sse?pattern=a.*&pattern=b&from=earliest"
	s, _ := openSSE(t, g.srv.URL, path, nil)
	s.nextEvent(t, "welcome")
	for range 2 {
		if ev := s.nextEvent(t, "subscribed"); ev.frame["recovered"] != nil {
			t.Fatalf("first subscribe: %s", ev.data)
		}
	}
	got := map[string][]int64{}
	var last string
	take := func(s *sseStream, n int) {
		for range n {
			ev := s.nextEvent(t, "message")
			if ev.id == "" {
				t.Fatalf("message without id: %s", ev.data)
			}
			last = ev.id
			topic := ev.frame["topic"].(string)
			got[topic] = append(got[topic], num(ev.frame, "offset"))
		}
	}
	take(s, 3)
	publish("b", 0)
	publish("a.y", 0)
	take(s, 2)
	s.close()
	for i := 3; i < 6; i++ {
		publish("a.x", i)
	}
	publish("b", 1)
	s2, _ := openSSE(t, g.srv.URL, path, http.Header{"Last-Event-ID": {last}})
	s2.nextEvent(t, "welcome")
	for range 2 {
		if ev := s2.nextEvent(t, "subscribed"); ev.frame["recovered"] != true {
			t.Fatalf("resume: %s", ev.data)
		}
	}
	take(s2, 4)
	want := map[string][]int64{"a.x": {0, 1, 2, 3, 4, 5}, "a.y": {0}, "b": {0, 1}}
	for k, w := range want {
		if fmt.Sprint(got[k]) != fmt.Sprint(w) {
			t.Fatalf("%s: got %v, want %v", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %v", got)
	}
	// The query form of the token resumes the same way; nothing is new.
	s3, _ := openSSE(t, g.srv.URL, path+"&last_event_id="+url.QueryEscape(last), nil)
	s3.nextEvent(t, "welcome")
	s3.nextEvent(t, "subscribed")
	s3.nextEvent(t, "subscribed")
	publish("b", 2)
	if ev := s3.nextEvent(t, "message"); ev.frame["topic"] != "b" || num(ev.frame, "offset") != 2 {
		t.Fatalf("got %s", ev.data)
	}
}

// TestSSERefused: bad requests and credentials get HTTP errors before the
// stream starts; a token in the query or the Authorization header works.
func TestSSERefused(t *testing.T) {
	g := newGateway(t, withAuth(t))
	for _, tc := range []struct {
		name   string
		path   string
		h      http.Header
		status int
	}{
		{"no pattern", "/v1/sse", nil, http.StatusBadRequest},
		{"no token", "/v1/sse?pattern=a", nil, http.StatusUnauthorized},
		{"bad token id", "/v1/sse?pattern=a&token=" + hs256(t, claims(nil, []string{"#"}, nil)) + "&last_event_id=%25%25", nil, http.StatusBadRequest},
		{"bad pattern", "/v1/sse?pattern=a..b&token=" + hs256(t, claims(nil, []string{"#"}, nil)), nil, http.StatusBadRequest},
		{"bad from", "/v1/sse?pattern=a&from=soon&token=" + hs256(t, claims(nil, []string{"#"}, nil)), nil, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, status := openSSE(t, g.srv.URL, tc.path, tc.h); s != nil || status != tc.status {
				t.Fatalf("status %d, want %d", status, tc.status)
			}
		})
	}
	tok := hs256(t, claims(nil, []string{"ok.#"}, nil))
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=ok.%23&pattern=secret&token="+tok, nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	if ev := s.nextEvent(t, "error"); ev.frame["code"] != "forbidden" {
		t.Fatalf("got %s", ev.data)
	}
	h, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=ok.a", http.Header{"Authorization": {"Bearer " + tok}})
	h.nextEvent(t, "welcome")
	h.nextEvent(t, "subscribed")
}

// TestSSEOutlivesWriteTimeout runs the gateway under http.Server read and
// write timeouts shorter than the stream: every write extends the write
// deadline and the read deadline is lifted, so keepalives and records keep
// flowing past them.
func TestSSEOutlivesWriteTimeout(t *testing.T) {
	const writeTimeout = 150 * time.Millisecond
	g := newGateway(t, func(c *gwConfig) {
		c.router.Session = session.Options{PingInterval: 40 * time.Millisecond, WriteTimeout: time.Second}
	})
	srv := httptest.NewUnstartedServer(g.rt)
	srv.Config.WriteTimeout = writeTimeout
	srv.Config.ReadTimeout = writeTimeout // its expiry would cancel the request's context
	srv.Start()
	t.Cleanup(srv.Close) // after the stream's own cleanup has closed it
	s, _ := openSSE(t, srv.URL, "/v1/sse?pattern=tick", nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	start := time.Now()
	keepalives := 0
	for time.Since(start) < 3*writeTimeout {
		select {
		case ev := <-s.events:
			if ev.comment == "keepalive" {
				keepalives++
			}
		case <-time.After(waitTimeout):
			t.Fatal("stream stalled")
		}
	}
	if keepalives == 0 {
		t.Fatal("no keepalive comment")
	}
	if _, err := g.rt.Publish(context.Background(), engine.Message{Topic: "tick", Data: []byte("1")}); err != nil {
		t.Fatal(err)
	}
	if ev := s.nextEvent(t, "message"); ev.frame["topic"] != "tick" {
		t.Fatalf("got %s", ev.data)
	}
}

// TestSSEShutdown: the stream ends with a close event on shutdown.
func TestSSEShutdown(t *testing.T) {
	g := newGateway(t)
	s, _ := openSSE(t, g.srv.URL, "/v1/sse?pattern=x", nil)
	s.nextEvent(t, "welcome")
	s.nextEvent(t, "subscribed")
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := g.rt.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ev := s.nextEvent(t, "close"); num(ev.frame, "code") != 1001 {
		t.Fatalf("got %s", ev.data)
	}
}
