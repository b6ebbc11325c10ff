package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/internal/wire/golden"
)

// replayGateway is a WebSocket gateway that answers each client frame
// with frames a test chooses, after a welcome.
type replayGateway struct {
	URL string
}

// newReplayGateway serves answer: it gets each client frame, decoded, and
// returns the frames to send back (each as its own WebSocket message).
// Pings are answered with pong.
func newReplayGateway(t *testing.T, answer func(req map[string]any) []string) *replayGateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		wg.Add(1)
		defer wg.Done()
		defer conn.CloseNow()
		write := func(s string) bool { return conn.Write(ctx, websocket.MessageText, []byte(s)) == nil }
		if !write(`{"op":"welcome","session":"s-1","epoch":"e-1","limits":{"max_frame_bytes":1048576}}`) {
			return
		}
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			var req map[string]any
			if json.Unmarshal(data, &req) != nil {
				continue
			}
			out := answer(req)
			if req["op"] == wire.OpPing {
				id, _ := json.Marshal(req["id"])
				out = []string{fmt.Sprintf(`{"op":"pong","id":%s}`, id)}
			}
			for _, f := range out {
				if !write(f) {
					return
				}
			}
		}
	}))
	t.Cleanup(func() {
		cancel()
		srv.Close()
		wg.Wait()
	})
	return &replayGateway{URL: srv.URL}
}

// withID replaces the id of a golden reply frame by the client's.
func withID(frame string, id any) string {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(frame), &m); err != nil {
		panic(err)
	}
	b, _ := json.Marshal(id)
	head := `{"op":"` + strings.Trim(string(m["op"]), `"`) + `"`
	rest := strings.TrimPrefix(frame, head)
	if old, ok := m["id"]; ok {
		rest = strings.TrimPrefix(rest, `,"id":`+string(old))
	}
	return head + `,"id":` + string(b) + rest
}

// goldenStream is what one subscription of a transcript session received.
type goldenStream struct {
	pattern, group string
	messages, gaps []string
}

// goldenStreams collects the message and gap frames of every session
// that uses the full envelope, by subscription.
func goldenStreams(t *testing.T) map[string][]*goldenStream {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*goldenStream{}
	for _, tr := range all {
		byKey := map[string]*goldenStream{}
		skip := map[string]bool{}
		for _, st := range tr.Steps {
			if st.Send || tr.Query[st.Session] != "" {
				continue
			}
			var f struct {
				Op, Pattern, Group string
				Delta              bool
			}
			if err := json.Unmarshal([]byte(st.Frame), &f); err != nil {
				t.Fatal(err)
			}
			if f.Op != wire.OpMessage && f.Op != wire.OpGap {
				continue
			}
			if f.Delta {
				// sub never asks for deltas: a subscription that did is
				// not one it makes.
				skip[st.Session+"\x00"+f.Pattern+"\x00"+f.Group] = true
			}
			k := st.Session + "\x00" + f.Pattern + "\x00" + f.Group
			s := byKey[k]
			if s == nil {
				s = &goldenStream{pattern: f.Pattern, group: f.Group}
				byKey[k] = s
				out[tr.Name] = append(out[tr.Name], s)
			}
			if f.Op == wire.OpMessage {
				s.messages = append(s.messages, st.Frame)
			} else {
				s.gaps = append(s.gaps, st.Frame)
			}
		}
		for k := range skip {
			s := byKey[k]
			out[tr.Name] = slices.DeleteFunc(out[tr.Name], func(o *goldenStream) bool { return o == s })
		}
	}
	return out
}

// TestGoldenSub: `switchyard sub --json` prints the message and gap
// frames of every golden transcript's subscriptions exactly as the
// gateway sent them, served by a gateway that replays them.
func TestGoldenSub(t *testing.T) {
	n := 0
	for name, streams := range goldenStreams(t) {
		for i, s := range streams {
			t.Run(fmt.Sprintf("%s/%d", name, i), func(t *testing.T) {
				n++
				gw := newReplayGateway(t, func(req map[string]any) []string {
					if req["op"] != wire.OpSubscribe {
						return nil
					}
					reply := `{"op":"subscribed","id":0,"pattern":` + quoteJSON(s.pattern) + `}`
					return append([]string{withID(reply, req["id"])}, append(append([]string{}, s.gaps...), s.messages...)...)
				})
				args := []string{"sub", s.pattern, "--json"}
				if s.group != "" {
					args = append(args, "--group", s.group)
				}
				out := runUntilLines(t, gw, args, len(s.messages)+len(s.gaps))
				var msgs, gaps []string
				for _, l := range out {
					if strings.HasPrefix(l, `{"op":"gap"`) {
						gaps = append(gaps, l)
					} else {
						msgs = append(msgs, l)
					}
				}
				if strings.Join(msgs, "\n") != strings.Join(s.messages, "\n") || strings.Join(gaps, "\n") != strings.Join(s.gaps, "\n") {
					t.Fatalf("sub --json printed\n\t%s\nwant the frames\n\t%s", strings.Join(out, "\n\t"),
						strings.Join(append(append([]string{}, s.gaps...), s.messages...), "\n\t"))
				}
			})
		}
	}
	if n < 10 {
		t.Fatalf("only %d subscriptions replayed", n)
	}
}

// runUntilLines runs the command until it has printed n lines on stdout,
// then interrupts it, and returns the lines.
func runUntilLines(t *testing.T, gw *replayGateway, args []string, n int) []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncBuffer
	g := &gateway{URL: gw.URL}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, g.env(nil, "", &out, &errb)) }()
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "\n") < n {
		select {
		case code := <-done:
			t.Fatalf("exit %d before %d lines; stdout:\n%s\nstderr:\n%s", code, n, out.String(), errb.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d lines after 10s, want %d; stdout:\n%s\nstderr:\n%s", strings.Count(out.String(), "\n"), n, out.String(), errb.String())
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, errb.String())
	}
	return strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
}

func quoteJSON(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestGoldenPub: `switchyard pub --json` prints every golden published
// frame as the frame without op and id, and every golden error frame as
// its code and message, exiting 1.
func TestGoldenPub(t *testing.T) {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range all {
		for _, st := range tr.Received() {
			var f struct{ Op, Code, Message string }
			if err := json.Unmarshal([]byte(st.Frame), &f); err != nil {
				t.Fatal(err)
			}
			if f.Op != wire.OpPublished && f.Op != wire.OpError {
				continue
			}
			n++
			gw := newReplayGateway(t, func(req map[string]any) []string {
				if req["op"] != wire.OpPublish {
					return nil
				}
				return []string{withID(st.Frame, req["id"])}
			})
			g := &gateway{URL: gw.URL}
			res := g.cli(t, nil, "", "pub", "g.t", "1", "--json")
			where := fmt.Sprintf("%s:%d", tr.Path, st.Line)
			if f.Op == wire.OpError {
				// The message as the gateway wrote it, with the CLI's hint
				// for the few codes that have one (TestErrorTexts holds those).
				want := "switchyard pub: " + g.hintFor(f.Code, f.Message) + "\n"
				if res.code != 1 || res.stderr != want {
					t.Errorf("%s: exit %d, stderr %q; want 1, %q", where, res.code, res.stderr, want)
				}
				continue
			}
			// The reply without "op" and "id": {"op":"published","id":N,"topic"… → {"topic"…
			frame := withID(st.Frame, 0)
			want := "{" + strings.TrimPrefix(frame, `{"op":"published","id":0,`) + "\n"
			if res.code != 0 || res.stdout != want {
				t.Errorf("%s: exit %d, stdout %q; want %q (stderr %q)", where, res.code, res.stdout, want, res.stderr)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d frames replayed", n)
	}
}

// hintFor is what the CLI prints for a gateway error with no flags set.
func (g *gateway) hintFor(code, msg string) string {
	return newGlobals(environment{getenv: func(string) string { return "" }}).withHint(code, msg)
}
