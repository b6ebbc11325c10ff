package jsengine_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// presenceLog records every presence change a node announces.
type presenceLog struct {
	mu     sync.Mutex
	events []string
}

func (l *presenceLog) PresenceChanged(m engine.PresenceMember, joined bool) {
	op := "leave"
	if joined {
		op = "join"
	}
	l.mu.Lock()
	l.events = append(l.events, op+" "+m.Session+" "+m.User)
	l.mu.Unlock()
}

func (l *presenceLog) snapshot() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := append([]string(nil), l.events...)
	sort.Strings(out)
	return out
}

func (l *presenceLog) has(n int) func() bool {
	return func() bool { return len(l.snapshot()) >= n }
}

// TestPresenceThreeNodes: members joined on three nodes are seen by every
// node once; a leave is announced once everywhere; a node that dies (its
// connection cut, no heartbeat) takes its members with it after the TTL,
// announced once; the others' members stay.
func TestPresenceThreeNodes(t *testing.T) {
	const ttl = time.Second
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := twoNodes(t, nodeOpts{url: url, prefix: prefix, ttl: ttl})
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := jsengine.New(ctx, jsengine.Options{Conn: nc, Prefix: prefix, MemberTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		_ = c.Close(cctx) // its connection is gone: errors are expected
	}()

	logs := map[string]*presenceLog{"a": {}, "b": {}, "c": {}}
	for name, e := range map[string]*jsengine.Engine{"a": a, "b": b, "c": c} {
		stop := e.WatchPresence(logs[name])
		defer stop()
	}
	for i, e := range []*jsengine.Engine{a, b, c} {
		m := engine.PresenceMember{Topic: "rooms:1.x", Session: fmt.Sprint("s", i), User: fmt.Sprint("u", i), Info: []byte(`{"n":1}`)}
		if err := e.PresenceJoin(ctx, m); err != nil {
			t.Fatal(err)
		}
		// A repeated join renews and is not announced again.
		if err := e.PresenceJoin(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	joins := []string{"join s0 u0", "join s1 u1", "join s2 u2"}
	for name, l := range logs {
		waitUntil(t, name+" sees three joins", l.has(3))
	}
	if _, n, err := a.PresenceList(ctx, "rooms:1.x", 0); err != nil || n != 3 {
		t.Fatalf("count on a: %d, %v", n, err)
	}
	members, n, _ := b.PresenceList(ctx, "rooms:1.x", 2)
	if n != 3 || len(members) != 2 || members[0].Session != "s0" || string(members[0].Info) != `{"n":1}` {
		t.Fatalf("list on b: %d %+v", n, members)
	}

	if err := a.PresenceLeave(ctx, "rooms:1.x", "s0"); err != nil {
		t.Fatal(err)
	}
	for name, l := range logs {
		waitUntil(t, name+" sees the leave", l.has(4))
	}

	nc.Close() // node c dies: no heartbeat, no leave of its own
	for _, name := range []string{"a", "b"} {
		waitUntilFor(t, name+" sees c's member leave", 10*ttl, logs[name].has(5))
	}
	// Wait past another TTL: b's member is renewed, nothing else happens.
	time.Sleep(ttl + ttl/2)
	want := append(append([]string(nil), joins...), "leave s0 u0", "leave s2 u2")
	sort.Strings(want)
	for _, name := range []string{"a", "b"} {
		if got := logs[name].snapshot(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s announced %v, want %v", name, got, want)
		}
	}
	if _, n, _ := a.PresenceList(ctx, "rooms:1.x", 0); n != 1 {
		t.Fatalf("count after c died: %d, want 1", n)
	}
}
