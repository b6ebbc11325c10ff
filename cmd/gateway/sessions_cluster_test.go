package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// TestClusterSessions runs three gateway nodes on one JetStream store:
// GET /v1/sessions on any node lists the sessions of all three, each
// naming its node, a page at a time in (node, id) order with none twice;
// a session on node B has one subscription ended and is then ended
// through node A (close 4001 and its reason); an unknown id is 404 on
// every node.
func TestClusterSessions(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	args := []string{"--engine", "nats", "--nats-url", url, "--nats-prefix", prefix}
	nodes := []*node{startNode(t, args...), startNode(t, args...), startNode(t, args...)}
	var ids []string
	var conns []*rawSession
	for _, n := range nodes {
		for range 2 {
			c, id := dialSession(t, n)
			c.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "orders.#"})
			c.expect(t, "subscribed")
			c.send(t, map[string]any{"op": "subscribe", "id": 2, "pattern": "audit.*"})
			c.expect(t, "subscribed")
			conns = append(conns, c)
			ids = append(ids, id)
		}
	}
	nodeOf := map[string]string{} // session id -> its node as listed

	for _, from := range nodes {
		got := listAllSessions(t, from, 2)
		var keys []string
		for _, s := range got {
			keys = append(keys, s["node"].(string)+" "+s["id"].(string))
			nodeOf[s["id"].(string)] = s["node"].(string)
			if s["host"] == "" || s["transport"] != "ws" || s["subscriptions"].(float64) != 2 {
				t.Errorf("entry %v", s)
			}
		}
		if !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
			t.Errorf("listing from %s is not in (node, id) order once each: %v", from.addr, keys)
		}
		for _, id := range ids {
			if nodeOf[id] == "" {
				t.Errorf("listing from %s misses session %s", from.addr, id)
			}
		}
		if len(got) != len(ids) {
			t.Errorf("listing from %s holds %d sessions, want %d", from.addr, len(got), len(ids))
		}
	}
	// Sessions of one node share its node name; the nodes' names differ.
	names := map[string]bool{}
	for i := range nodes {
		if nodeOf[ids[2*i]] != nodeOf[ids[2*i+1]] {
			t.Errorf("node %d's sessions name nodes %s and %s", i, nodeOf[ids[2*i]], nodeOf[ids[2*i+1]])
		}
		names[nodeOf[ids[2*i]]] = true
	}
	if len(names) != len(nodes) {
		t.Fatalf("node names %v, want %d distinct", names, len(nodes))
	}

	// The first session of node B (1), ended through node A (0).
	victim, bystander := conns[2], conns[3]
	vid := ids[2]
	if st, body := adminCall(t, nodes[0], http.MethodDelete, "/v1/sessions/"+vid+"/subscriptions/orders.%23"); st != http.StatusNoContent {
		t.Fatalf("end of a subscription through another node: %d %v", st, body)
	}
	if m := victim.expect(t, "unsubscribed"); m["pattern"] != "orders.#" || m["reason"] != router.UnsubscribedAdministratorReason {
		t.Fatalf("unsubscribed frame %v", m)
	}
	if st, body := adminCall(t, nodes[0], http.MethodDelete, "/v1/sessions/"+vid+"/subscriptions/orders.%23"); st != http.StatusNotFound || body["code"] != "not_subscribed" {
		t.Fatalf("second end of the subscription: %d %v", st, body)
	}
	if st, body := adminCall(t, nodes[0], http.MethodDelete, "/v1/sessions/"+vid); st != http.StatusNoContent {
		t.Fatalf("end through another node: %d %v", st, body)
	}
	status, reason := closeOf(t, victim)
	if status != router.CloseAdministrator || reason != router.CloseAdministratorReason {
		t.Fatalf("close %d %q, want %d %q", status, reason, router.CloseAdministrator, router.CloseAdministratorReason)
	}
	bystander.send(t, map[string]any{"op": "subscribe", "id": 3, "pattern": "x.y"})
	bystander.expect(t, "subscribed")

	for i, n := range nodes {
		st, body := adminCall(t, n, http.MethodDelete, "/v1/sessions/0123456789abcdef")
		if st != http.StatusNotFound || body["code"] != "unknown_session" {
			t.Errorf("node %d: end of an unknown session: %d %v", i, st, body)
		}
	}
	waitFor(t, "the ended session leaves the listing", func() bool {
		for _, s := range listAllSessions(t, nodes[2], 100) {
			if s["id"] == vid {
				return false
			}
		}
		return true
	})
}

// listAllSessions pages through GET /v1/sessions on n with limit.
func listAllSessions(t *testing.T, n *node, limit int) []map[string]any {
	t.Helper()
	var out []map[string]any
	cursor := ""
	for page := 0; ; page++ {
		if page > 50 {
			t.Fatal("more pages than sessions")
		}
		q := url.Values{"limit": {strconv.Itoa(limit)}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		st, body := adminCall(t, n, http.MethodGet, "/v1/sessions?"+q.Encode())
		if st != http.StatusOK || body["unanswered"] != nil {
			t.Fatalf("page %d: %d %v", page, st, body)
		}
		list, _ := body["sessions"].([]any)
		if len(list) > limit {
			t.Fatalf("page %d holds %d sessions, limit %d", page, len(list), limit)
		}
		for _, s := range list {
			out = append(out, s.(map[string]any))
		}
		next, _ := body["next_cursor"].(string)
		if next == "" {
			return out
		}
		cursor = next
	}
}

func adminCall(t *testing.T, n *node, method, path string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+n.addr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}

// rawSession is a WebSocket session read by the test itself, frame by
// frame, so that its close status can be read.
type rawSession struct{ c *websocket.Conn }

// dialSession opens a session on n and returns it with its id (from the
// welcome).
func dialSession(t *testing.T, n *node) (*rawSession, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+n.addr+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CloseNow() })
	s := &rawSession{c: c}
	w := s.expect(t, "welcome")
	return s, w["session"].(string)
}

func (s *rawSession) send(t *testing.T, v map[string]any) {
	t.Helper()
	data, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.c.Write(ctx, websocket.MessageText, data); err != nil {
		t.Fatal(err)
	}
}

// read returns the next message's first frame, or the read error.
func (s *rawSession) read() (map[string]any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, data, err := s.c.Read(ctx)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	line, _, _ := strings.Cut(string(data), "\n")
	return m, json.Unmarshal([]byte(line), &m)
}

func (s *rawSession) expect(t *testing.T, op string) map[string]any {
	t.Helper()
	m, err := s.read()
	if err != nil || m["op"] != op {
		t.Fatalf("got %v %v, want %s", m, err, op)
	}
	return m
}

// closeOf reads c until its close and returns its status and reason.
func closeOf(t *testing.T, s *rawSession) (websocket.StatusCode, string) {
	t.Helper()
	for range 100 {
		m, err := s.read()
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code, ce.Reason
		}
		if err != nil {
			t.Fatalf("read until the close: %v", err)
		}
		t.Logf("frame before the close: %v", m)
	}
	t.Fatal("no close after 100 frames")
	return 0, ""
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i > 500 {
			t.Fatalf("timed out: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
