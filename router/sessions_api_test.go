package router_test

import (
	"bufio"
	"context"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestSessionsAPI lists a node's WebSocket and SSE sessions a page at a
// time, with who opened each, its subscriptions and queue counters.
func TestSessionsAPI(t *testing.T) {
	g := newGateway(t, withAuth(t))
	cl := claims(nil, []string{"orders.#"}, nil)
	cl["sub"] = "alice"
	alice := hs256(t, cl)
	c1 := g.dialToken(t, alice)
	c1.subscribe(t, "orders.#")
	c1.subscribe(t, "orders.eu")
	c2 := g.dialToken(t, adminKey)
	c3 := g.dialToken(t, adminKey)
	want := []string{}
	for _, c := range []*client{c1, c2, c3} {
		want = append(want, c.welcome["session"].(string))
	}

	// An SSE session, listed until its request ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", g.srv.URL+"/v1/sse?pattern=orders.%23", nil)
	req.Header.Set("Authorization", "Bearer "+adminKey)
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	for i := 0; ; i++ { // the welcome event: the session is listed
		line, err := rd.ReadString('\n')
		if err != nil || i > 50 {
			t.Fatalf("reading the SSE welcome: %q %v", line, err)
		}
		if strings.Contains(line, `"op":"welcome"`) {
			break
		}
	}

	host, _ := os.Hostname()
	var got []map[string]any
	cursor := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("more pages than sessions")
		}
		q := url.Values{"limit": {"2"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		code, body := g.httpAuth(t, "GET", "/v1/sessions?"+q.Encode(), adminKey, nil)
		if code != 200 {
			t.Fatalf("page %d: %d %v", page, code, body)
		}
		list, _ := body["sessions"].([]any)
		if len(list) == 0 || len(list) > 2 {
			t.Fatalf("page %d holds %d sessions: %v", page, len(list), body)
		}
		for _, s := range list {
			got = append(got, s.(map[string]any))
		}
		next, _ := body["next_cursor"].(string)
		if next == "" {
			break
		}
		cursor = next
	}
	if len(got) != 4 {
		t.Fatalf("listed %d sessions, want 4: %v", len(got), got)
	}
	var ids []string
	var sse map[string]any
	for _, s := range got {
		id := s["id"].(string)
		if slices.Contains(ids, id) {
			t.Fatalf("session %s listed twice", id)
		}
		ids = append(ids, id)
		if s["node"] != host || s["remote"] != "127.0.0.1" {
			t.Errorf("session %s: node %v remote %v, want %s and 127.0.0.1", id, s["node"], s["remote"], host)
		}
		since, err := time.Parse(time.RFC3339Nano, s["since"].(string))
		if err != nil || time.Since(since) > time.Minute || time.Since(since) < 0 {
			t.Errorf("session %s: since %v (%v)", id, s["since"], err)
		}
		if s["transport"] == "sse" {
			sse = s
		}
	}
	if !slices.IsSorted(ids) {
		t.Errorf("ids not in order: %v", ids)
	}
	for _, id := range want {
		if !slices.Contains(ids, id) {
			t.Errorf("session %s not listed: %v", id, ids)
		}
	}
	for _, s := range got {
		if s["id"] != want[0] {
			continue
		}
		if s["transport"] != "ws" || s["user"] != "alice" || num(s, "subscriptions") != 2 || num(s, "queued") != 0 || num(s, "drops") != 0 {
			t.Errorf("alice's session = %v", s)
		}
	}
	if sse == nil || sse["user"] != "admin" || num(sse, "subscriptions") != 1 {
		t.Errorf("SSE session = %v", sse)
	}

	for _, tc := range []struct {
		name, cred, path string
		code             int
	}{
		{"no credential", "", "/v1/sessions", 401},
		{"not admin", alice, "/v1/sessions", 403},
		{"bad cursor", adminKey, "/v1/sessions?cursor=%21", 400},
		{"bad limit", adminKey, "/v1/sessions?limit=x", 400},
		{"info without credential", "", "/v1/info", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if code, body := g.httpAuth(t, "GET", tc.path, tc.cred, nil); code != tc.code {
				t.Errorf("%d %v, want %d", code, body, tc.code)
			}
		})
	}

	code, info := g.httpAuth(t, "GET", "/v1/info", alice, nil)
	if code != 200 || info["epoch"] != c1.welcome["epoch"] || info["engine"] != "memengine" || info["node"] != host || info["version"] == "" {
		t.Errorf("info: %d %v", code, info)
	}
}
