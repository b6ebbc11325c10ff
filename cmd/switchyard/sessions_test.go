package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSessionsCommands: sessions lists a session with its node and host
// (JSON lines and the readable table), session unsubscribe ends one of its
// subscriptions (the client gets unsubscribed, reason administrator) and
// session end closes it with 4001; both need the admin key.
func TestSessionsCommands(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, strings.Replace(g.URL, "http", "ws", 1)+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	read := func() (map[string]any, error) {
		_, data, err := c.Read(ctx)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		line, _, _ := strings.Cut(string(data), "\n")
		return m, json.Unmarshal([]byte(line), &m)
	}
	welcome, err := read()
	if err != nil {
		t.Fatal(err)
	}
	id := welcome["session"].(string)
	_ = c.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"orders.#"}`))
	if m, err := read(); err != nil || m["op"] != "subscribed" {
		t.Fatalf("subscribe: %v %v", m, err)
	}

	admin := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	if r := g.cli(t, nil, "", "sessions"); r.code == 0 {
		t.Fatalf("sessions without the admin key: %+v", r)
	}
	r := g.cli(t, admin, "", "sessions")
	host, _ := os.Hostname()
	got := lines(t, r.stdout)
	if r.code != 0 || len(got) != 1 || got[0]["id"] != id || got[0]["node"] != host || got[0]["host"] != host || got[0]["subscriptions"] != 1.0 {
		t.Fatalf("sessions: %+v", r)
	}
	r = g.cli(t, admin, "", "--json=false", "sessions")
	if r.code != 0 || !strings.Contains(r.stdout, "NODE") || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, host) {
		t.Fatalf("readable sessions: %+v", r)
	}

	if r := g.cli(t, admin, "", "session", "unsubscribe", id, "orders.#"); r.code != 0 {
		t.Fatalf("session unsubscribe: %+v", r)
	}
	if m, err := read(); err != nil || m["op"] != "unsubscribed" || m["pattern"] != "orders.#" || m["reason"] != "administrator" {
		t.Fatalf("unsubscribed: %v %v", m, err)
	}
	if r := g.cli(t, admin, "", "session", "unsubscribe", id, "orders.#"); r.code == 0 || !strings.Contains(r.stderr, "no subscription") {
		t.Fatalf("second session unsubscribe: %+v", r)
	}
	if r := g.cli(t, admin, "", "session", "end", id); r.code != 0 {
		t.Fatalf("session end: %+v", r)
	}
	_, err = read()
	var ce websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != 4001 || ce.Reason != "closed by an administrator" {
		t.Fatalf("close: %v", err)
	}
	if r := g.cli(t, admin, "", "session", "end", "0123456789abcdef"); r.code == 0 || !strings.Contains(r.stderr, "no session") {
		t.Fatalf("session end of an unknown id: %+v", r)
	}
}
