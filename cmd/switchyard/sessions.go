package main

// The sessions commands: every session of every gateway node (GET
// /v1/sessions, admin key), and ending one or one of its subscriptions on
// whichever node holds it.

import (
	"context"
	"fmt"
	"net/url"
	"text/tabwriter"
)

// sessionEntry is one entry of GET /v1/sessions, as much as the CLI prints.
type sessionEntry struct {
	ID            string `json:"id"`
	Transport     string `json:"transport"`
	Remote        string `json:"remote"`
	User          string `json:"user"`
	Subscriptions int    `json:"subscriptions"`
	Queued        int    `json:"queued"`
	Drops         uint64 `json:"drops"`
	Node          string `json:"node"`
	Host          string `json:"host"`
	Since         string `json:"since"`
}

func runSessions(ctx context.Context, g *globals, args []string) error {
	if _, err := parse(g.flagSet("sessions"), args, 0); err != nil {
		return err
	}
	var list []raw[sessionEntry]
	unanswered := 0
	q := url.Values{}
	for page := 0; ; page++ {
		if page == maxPages {
			return fmt.Errorf("GET /v1/sessions: more than %d pages; stopped", maxPages)
		}
		var reply struct {
			Sessions   []raw[sessionEntry] `json:"sessions"`
			NextCursor string              `json:"next_cursor"`
			Unanswered int                 `json:"unanswered"`
		}
		if err := g.call(ctx, "GET", "/v1/sessions", q, nil, &reply); err != nil {
			return err
		}
		list = append(list, reply.Sessions...)
		unanswered = max(unanswered, reply.Unanswered)
		if reply.NextCursor == "" {
			break
		}
		q.Set("cursor", reply.NextCursor)
	}
	if unanswered > 0 {
		fmt.Fprintf(g.env.stderr, "switchyard: %d gateway node(s) did not answer in time; their sessions are missing\n", unanswered)
	}
	if g.jsonOut() {
		for _, s := range list {
			if err := g.emit(s.raw); err != nil {
				return err
			}
		}
		return nil
	}
	g.table("SESSION\tNODE\tHOST\tTRANSPORT\tREMOTE\tUSER\tSUBS\tQUEUED\tDROPS\tSINCE", func(w *tabwriter.Writer) {
		for _, r := range list {
			s := r.v
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", s.ID, s.Node, dash(s.Host), s.Transport, s.Remote,
				dash(s.User), s.Subscriptions, s.Queued, s.Drops, s.Since)
		}
	})
	return nil
}

func runSession(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("session")
	group := fs.String("group", "", "unsubscribe: the consumer group of a group subscription")
	pos, err := parse(fs, args, 3)
	if err != nil {
		return err
	}
	if len(pos) < 2 {
		return usagef("session needs end ID or unsubscribe ID PATTERN")
	}
	id := pos[1]
	path := "/v1/sessions/" + url.PathEscape(id)
	switch {
	case pos[0] == "end" && len(pos) == 2:
		if err := g.call(ctx, "DELETE", path, nil, nil, nil); err != nil {
			return err
		}
		if g.jsonOut() {
			return g.emit(map[string]any{"ended": id})
		}
		g.printf("ended session %s\n", id)
		return nil
	case pos[0] == "unsubscribe" && len(pos) == 3:
		var q url.Values
		if *group != "" {
			q = url.Values{"group": {*group}}
		}
		if err := g.call(ctx, "DELETE", path+"/subscriptions/"+url.PathEscape(pos[2]), q, nil, nil); err != nil {
			return err
		}
		if g.jsonOut() {
			out := map[string]any{"session": id, "unsubscribed": pos[2]}
			if *group != "" {
				out["group"] = *group
			}
			return g.emit(out)
		}
		g.printf("ended the subscription of session %s to %s\n", id, pos[2])
		return nil
	}
	return usagef("session needs end ID or unsubscribe ID PATTERN")
}
