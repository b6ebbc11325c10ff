package main

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestClusterPresence runs three gateway nodes on one JetStream store: a
// session present on a topic hears each other session's join and leave
// once, whichever node it is on, and every node lists the same members.
func TestClusterPresence(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	args := []string{"--engine", "nats", "--nats-url", url, "--nats-prefix", prefix}
	nodes := []*node{startNode(t, args...), startNode(t, args...), startNode(t, args...)}
	conns := make([]*wsConn, len(nodes))
	sessions := make([]string, len(nodes))
	for i, n := range nodes {
		// Each node learns of the others' members through NATS. A member
		// this node has not seen yet when the session subscribes is told
		// to it as a join, so wait until the node lists the earlier ones.
		waitPresenceCount(t, n, "rooms.9", i)
		conns[i] = dialNode(t, n)
		conns[i].send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "rooms.9", "presence": true})
		conns[i].expect(t, "subscribed")
		conns[i].send(t, map[string]any{"op": "presence", "id": 2, "topic": "rooms.9"})
		p := conns[i].expect(t, "presence")
		members, _ := p["members"].([]any)
		for _, m := range members {
			if s := m.(map[string]any)["session"].(string); !contains(sessions, s) {
				sessions[i] = s // the one not seen before is this session
			}
		}
		if int(p["count"].(float64)) != i+1 {
			t.Fatalf("node %d lists %v, want %d members", i, p, i+1)
		}
		// Earlier sessions, on other nodes, hear this one join once.
		for j := range i {
			if m := conns[j].expect(t, "join"); m["topic"] != "rooms.9" || m["session"] != sessions[i] {
				t.Fatalf("session %d: join %v, want session %s", j, m, sessions[i])
			}
		}
	}
	conns[1].send(t, map[string]any{"op": "unsubscribe", "id": 3, "pattern": "rooms.9"})
	conns[1].expect(t, "unsubscribed")
	for _, j := range []int{0, 2} {
		if m := conns[j].expect(t, "leave"); m["session"] != sessions[1] {
			t.Fatalf("session %d: leave %v", j, m)
		}
	}
	// No duplicate arrived meanwhile: the next frame answers a new request.
	for _, j := range []int{0, 2} {
		conns[j].send(t, map[string]any{"op": "presence", "id": 4, "topic": "rooms.9"})
		if p := conns[j].expect(t, "presence"); int(p["count"].(float64)) != 2 {
			t.Fatalf("node %d after the leave: %v", j, p)
		}
	}
	resp, err := http.Get("http://" + nodes[1].addr + "/v1/presence/rooms.9?count=1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&body)
	if resp.StatusCode != 200 || int(body["count"].(float64)) != 2 {
		t.Fatalf("GET presence on node 1: %d %v", resp.StatusCode, body)
	}
}

// waitPresenceCount waits, bounded, until node n's GET /v1/presence lists
// want members of topic.
func waitPresenceCount(t *testing.T, n *node, topic string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + n.addr + "/v1/presence/" + topic + "?count=1")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Count int `json:"count"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err == nil && body.Count == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s lists %d members of %s, want %d", n.addr, body.Count, topic, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
