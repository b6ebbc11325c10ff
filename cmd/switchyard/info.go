package main

// info, presence and help, and the paging every listing goes through.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"text/tabwriter"
)

// maxPages bounds the pages one listing reads (the gateway's default page
// is 100 items: a million items).
const maxPages = 10000

// listAll reads every page of a listing (GET path?cursor=…): the gateway
// answers {"<key>":[…],"next_cursor"?}. each gets every item as it came.
func (g *globals) listAll(ctx context.Context, path, key string, query url.Values, each func(json.RawMessage) error) error {
	q := url.Values{}
	for k, v := range query {
		q[k] = v
	}
	for range maxPages {
		var page map[string]json.RawMessage
		if err := g.call(ctx, "GET", path, q, nil, &page); err != nil {
			return err
		}
		var items []json.RawMessage
		if err := json.Unmarshal(page[key], &items); err != nil && page[key] != nil {
			return fmt.Errorf("GET %s: bad reply: %w", path, err)
		}
		for _, it := range items {
			if err := each(it); err != nil {
				return err
			}
		}
		var next string
		_ = json.Unmarshal(page["next_cursor"], &next)
		if next == "" {
			return nil
		}
		q.Set("cursor", next)
	}
	return fmt.Errorf("GET %s: more than %d pages; stopped", path, maxPages)
}

// listInto reads every page of a listing into a slice of raw[T].
func listInto[T any](ctx context.Context, g *globals, path, key string, query url.Values) ([]raw[T], error) {
	var out []raw[T]
	err := g.listAll(ctx, path, key, query, func(b json.RawMessage) error {
		var r raw[T]
		if err := json.Unmarshal(b, &r); err != nil {
			return fmt.Errorf("GET %s: bad item: %w", path, err)
		}
		out = append(out, r)
		return nil
	})
	return out, err
}

func runInfo(ctx context.Context, g *globals, args []string) error {
	if _, err := parse(g.flagSet("info"), args, 0); err != nil {
		return err
	}
	var info map[string]any
	if err := g.call(ctx, "GET", "/v1/info", nil, nil, &info); err != nil {
		return err
	}
	// Counts from the listings the caller may read; a refused one is
	// left out rather than failing the command.
	count := func(path, key string) (int, bool) {
		n := 0
		err := g.listAll(ctx, path, key, nil, func(json.RawMessage) error { n++; return nil })
		return n, err == nil
	}
	if n, ok := count("/v1/topics", "topics"); ok {
		info["topics"] = n
	}
	if n, ok := count("/v1/groups", "groups"); ok {
		info["groups"] = n
	}
	if n, ok := count("/v1/sessions", "sessions"); ok {
		info["sessions"] = n
	}
	// The limits a session gets are in the WebSocket's welcome.
	if c, err := g.dial(ctx); err == nil {
		info["limits"] = c.Welcome().Limits
		c.Close()
	}
	if g.jsonOut() {
		return g.emit(info)
	}
	w := tabwriter.NewWriter(g.env.stdout, 2, 4, 2, ' ', 0)
	for _, k := range []string{"version", "engine", "epoch", "node", "topics", "groups", "sessions"} {
		if v, ok := info[k]; ok {
			fmt.Fprintf(w, "%s:\t%v\n", k, v)
		}
	}
	if l, ok := info["limits"]; ok {
		b, _ := json.Marshal(l)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		for _, k := range sortedKeys(m) {
			fmt.Fprintf(w, "limit %s:\t%v\n", k, m[k])
		}
	}
	return w.Flush()
}

func runPresence(ctx context.Context, g *globals, args []string) error {
	pos, err := parse(g.flagSet("presence"), args, 1)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("presence needs a TOPIC")
	}
	var list raw[struct {
		Count   int `json:"count"`
		Members []struct {
			Session string          `json:"session"`
			User    string          `json:"user"`
			Info    json.RawMessage `json:"info"`
		} `json:"members"`
	}]
	if err := g.call(ctx, "GET", "/v1/presence/"+url.PathEscape(pos[0]), nil, nil, &list); err != nil {
		return err
	}
	if g.jsonOut() {
		return g.emit(list.raw)
	}
	g.printf("%s: %d present\n", pos[0], list.v.Count)
	g.table("SESSION\tUSER\tINFO", func(w *tabwriter.Writer) {
		for _, m := range list.v.Members {
			info := string(m.Info)
			fmt.Fprintf(w, "%s\t%s\t%s\n", m.Session, dash(m.User), dash(info))
		}
	})
	return nil
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
