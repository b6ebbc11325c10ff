package router_test

import (
	"net/http"
	"testing"

	"github.com/switchyard/switchyard/router"
)

// userBackend admits every connection as the user named by X-User, with
// info {"name": X-User} and every subscribe grant.
func userBackend(t *testing.T) *backend {
	return newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		h, _ := body["headers"].(map[string]any)
		user, _ := h["X-User"].(string)
		reply(w, map[string]any{"allow": true, "user": user, "info": map[string]any{"name": user},
			"grants": map[string]any{"subscribe": []string{"#"}, "publish": []string{"#"}}})
	})
}

func (g *gateway) dialUser(t *testing.T, user string) *client {
	t.Helper()
	return g.dialWithHeader(t, http.Header{"X-User": {user}})
}

func TestPresenceJoinLeaveList(t *testing.T) {
	b := userBackend(t)
	g := newGateway(t, withHooks(b, func(o *router.HookOptions) { o.Headers = []string{"X-User"} }),
		func(c *gwConfig) { c.router.MaxPresencePerTopic = 2 })
	ann := g.dialUser(t, "ann")
	ann.subscribe(t, "rooms.42", "presence", true)
	bob := g.dialUser(t, "bob")
	bob.subscribe(t, "rooms.42", "presence", true)

	j := ann.nextOp(t, "join")
	if j["topic"] != "rooms.42" || j["user"] != "bob" || j["session"] != bob.welcome["session"] ||
		j["info"].(map[string]any)["name"] != "bob" {
		t.Fatalf("join %v", j)
	}
	bob.noFrame(t) // no join for its own session, none for earlier members

	st, body, _ := g.httpDo(t, "GET", "/v1/presence/rooms.42", nil)
	if st != 200 || num(body, "count") != 2 || len(body["members"].([]any)) != 2 {
		t.Fatalf("GET presence: %d %v", st, body)
	}
	st, body, _ = g.httpDo(t, "GET", "/v1/presence/rooms.42?count=1", nil)
	if _, listed := body["members"]; st != 200 || num(body, "count") != 2 || listed {
		t.Fatalf("GET presence?count=1: %d %v", st, body)
	}
	p := ann.mustOK(t, map[string]any{"op": "presence", "topic": "rooms.42"}, "presence")
	if num(p, "count") != 2 || p["topic"] != "rooms.42" {
		t.Fatalf("presence op %v", p)
	}

	// Over the bound: counted, not listed, not announced.
	cat := g.dialUser(t, "cat")
	cat.subscribe(t, "rooms.42", "presence", true)
	ann.noFrame(t)
	if _, body, _ = g.httpDo(t, "GET", "/v1/presence/rooms.42", nil); num(body, "count") != 3 || len(body["members"].([]any)) != 2 {
		t.Fatalf("over the bound: %v", body)
	}

	// Plain subscribers without presence see nothing of it.
	dan := g.dialUser(t, "dan")
	dan.subscribe(t, "rooms.42")

	bob.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "rooms.42"}, "unsubscribed")
	if l := ann.nextOp(t, "leave"); l["user"] != "bob" || l["session"] != bob.welcome["session"] {
		t.Fatalf("leave %v", l)
	}
	cat.conn.Close(1000, "")
	<-cat.done
	ann.noFrame(t) // cat was hidden: its leave is not announced either
	// The gateway notices cat's close on its own time: wait for it.
	waitUntil(t, "cat's session to leave", func() bool {
		_, body, _ = g.httpDo(t, "GET", "/v1/presence/rooms.42?count=1", nil)
		return num(body, "count") == 1
	})
	dan.noFrame(t)

	for _, tt := range []map[string]any{
		{"op": "subscribe", "pattern": "rooms.*", "presence": true},
		{"op": "subscribe", "pattern": "rooms.1", "presence": true, "group": "g"},
		{"op": "presence"},
	} {
		if e := ann.call(t, tt); e["code"] != "bad_request" {
			t.Errorf("%v: %v", tt, e)
		}
	}
}

func TestPresenceSessionEnds(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok, _ := lifeToken(t, "ann", 60e9, []string{"rooms.#"}, nil, nil)
	ann := g.dialToken(t, tok)
	ann.subscribe(t, "rooms.1", "presence", true)
	tok2, _ := lifeToken(t, "bob", 60e9, []string{"rooms.#"}, nil, nil)
	bob := g.dialToken(t, tok2)
	bob.subscribe(t, "rooms.1", "presence", true)
	j := ann.nextOp(t, "join")
	if _, ok := j["info"]; j["user"] != "bob" || ok {
		t.Fatalf("join %v: want user bob from the token's sub, no info", j)
	}
	bob.conn.Close(1000, "")
	<-bob.done
	if l := ann.nextOp(t, "leave"); l["user"] != "bob" {
		t.Fatalf("leave %v", l)
	}
	// Seeing who is there needs a subscribe grant.
	tok3, _ := lifeToken(t, "eve", 60e9, []string{"other.#"}, nil, nil)
	eve := g.dialToken(t, tok3)
	if e := eve.call(t, map[string]any{"op": "presence", "topic": "rooms.1"}); e["code"] != "forbidden" {
		t.Fatalf("presence without a grant: %v", e)
	}
	if st, _ := g.httpAuth(t, "GET", "/v1/presence/rooms.1", tok3, nil); st != http.StatusForbidden {
		t.Fatalf("GET presence without a grant: %d", st)
	}
}
