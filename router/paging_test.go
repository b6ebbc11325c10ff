package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// getPage GETs a listing page and returns its items' raw JSON, the
// next_cursor and the body's size.
func getPage(t *testing.T, g *gateway, path, key string) ([]json.RawMessage, string, int) {
	t.Helper()
	resp, err := g.srv.Client().Get(g.srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, data)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	var items []json.RawMessage
	if err := json.Unmarshal(m[key], &items); err != nil {
		t.Fatalf("GET %s: %q is not a list: %v", path, key, err)
	}
	var next string
	if raw, ok := m["next_cursor"]; ok {
		_ = json.Unmarshal(raw, &next)
	}
	return items, next, len(data)
}

// pageAll follows next_cursor from path and returns every item's field
// value, failing on a repeat or on more than maxPages pages.
func pageAll(t *testing.T, g *gateway, path, key, field string, maxPages int) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	cursor := ""
	for pages := 0; ; pages++ {
		if pages >= maxPages {
			t.Fatalf("%s: more than %d pages", path, maxPages)
		}
		p := path
		if cursor != "" {
			p += sep + "cursor=" + url.QueryEscape(cursor)
		}
		items, next, _ := getPage(t, g, p, key)
		for _, it := range items {
			var m map[string]any
			_ = json.Unmarshal(it, &m)
			v, _ := m[field].(string)
			if seen[v] {
				t.Fatalf("%s: %q returned twice", path, v)
			}
			seen[v] = true
			out = append(out, v)
		}
		if next == "" {
			return out
		}
		cursor = next
	}
}

// TestListingsPaged: with 20,000 topics, GET /v1/topics answers one bounded
// page with a next_cursor, and following the cursors lists every topic
// once; groups and dead letters page the same way, dead letters under the
// byte bound as well.
func TestListingsPaged(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	const topics = 20000
	for i := range topics {
		if _, err := g.eng.CreateTopic(ctx, engine.TopicConfig{Name: fmt.Sprintf("spray.t%05d", i)}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("topics", func(t *testing.T) {
		items, next, size := getPage(t, g, "/v1/topics", "topics")
		if len(items) != router.DefaultPageLimit || next == "" || size > router.MaxPageBytes {
			t.Fatalf("default page: %d topics, %d bytes, next_cursor %q; want %d topics under %d bytes and a cursor",
				len(items), size, next, router.DefaultPageLimit, router.MaxPageBytes)
		}
		names := pageAll(t, g, "/v1/topics?limit=1000", "topics", "name", topics/1000+2)
		if len(names) != topics {
			t.Fatalf("paged through %d topics, want %d", len(names), topics)
		}
	})

	t.Run("bad limits and cursors", func(t *testing.T) {
		for _, q := range []string{"limit=-1", fmt.Sprintf("limit=%d", router.MaxPageLimit+1), "limit=x", "cursor=***"} {
			if st, m, _ := g.httpDo(t, "GET", "/v1/topics?"+q, nil); st != 400 || m["code"] != "bad_request" {
				t.Fatalf("%s: %d %v", q, st, m)
			}
		}
	})

	t.Run("groups", func(t *testing.T) {
		for i := range 5 {
			st, m, _ := g.httpDo(t, "POST", fmt.Sprintf("/v1/groups/g%d/poll", i), map[string]any{"pattern": "grp.#", "max": 1})
			if st != 200 {
				t.Fatalf("poll: %d %v", st, m)
			}
		}
		if names := pageAll(t, g, "/v1/groups?limit=2", "groups", "name", 4); len(names) != 5 {
			t.Fatalf("groups %v", names)
		}
	})

	t.Run("dead letters", func(t *testing.T) {
		for i := range 250 {
			dl := engine.DeadLetter{Reason: engine.ReasonMaxAttempts, Group: "dlg",
				Record: engine.Record{Topic: "spray.t00001", Offset: int64(i), Data: []byte("1")}}
			if err := g.eng.AddDeadLetter(ctx, dl); err != nil {
				t.Fatal(err)
			}
		}
		if ids := pageAll(t, g, "/v1/deadletters?group=dlg", "deadletters", "id", 4); len(ids) != 250 {
			t.Fatalf("paged through %d dead letters, want 250", len(ids))
		}
		big := []byte(`"` + strings.Repeat("x", 400<<10) + `"`)
		for i := range 5 {
			dl := engine.DeadLetter{Reason: engine.ReasonMaxAttempts, Group: "big",
				Record: engine.Record{Topic: "spray.t00001", Offset: int64(i), Data: big}}
			if err := g.eng.AddDeadLetter(ctx, dl); err != nil {
				t.Fatal(err)
			}
		}
		items, next, size := getPage(t, g, "/v1/deadletters?group=big&limit=1000", "deadletters")
		if len(items) >= 5 || next == "" || size > router.MaxPageBytes {
			t.Fatalf("big letters: %d items, %d bytes, next_cursor %q", len(items), size, next)
		}
		if ids := pageAll(t, g, "/v1/deadletters?group=big", "deadletters", "id", 6); len(ids) != 5 {
			t.Fatalf("paged through %d big dead letters, want 5", len(ids))
		}
	})
}

// TestRedriveBoundsIDs: a redrive request naming more than
// router.MaxRedriveIDs ids is refused before the engine sees it.
func TestRedriveBoundsIDs(t *testing.T) {
	g := newGateway(t)
	ids := make([]string, router.MaxRedriveIDs+1)
	for i := range ids {
		ids[i] = fmt.Sprintf("id-%d", i)
	}
	if st, m, _ := g.httpDo(t, "POST", "/v1/deadletters/redrive", map[string]any{"ids": ids}); st != 400 || m["code"] != "bad_request" {
		t.Fatalf("redrive of %d ids: %d %v", len(ids), st, m)
	}
	if st, m, _ := g.httpDo(t, "POST", "/v1/deadletters/redrive", map[string]any{"ids": ids[:router.MaxRedriveIDs]}); st != 200 {
		t.Fatalf("redrive of %d ids: %d %v", router.MaxRedriveIDs, st, m)
	}
}

// allPages follows next_cursor from path (at most maxPages pages) and
// returns every item decoded.
func allPages(t *testing.T, g *gateway, path, key string, maxPages int) []any {
	t.Helper()
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	var out []any
	cursor := ""
	for range maxPages {
		p := path
		if cursor != "" {
			p += sep + "cursor=" + url.QueryEscape(cursor)
		}
		items, next, _ := getPage(t, g, p, key)
		for _, it := range items {
			var v any
			_ = json.Unmarshal(it, &v)
			out = append(out, v)
		}
		if next == "" {
			return out
		}
		cursor = next
	}
	t.Fatalf("%s: more than %d pages", path, maxPages)
	return nil
}
