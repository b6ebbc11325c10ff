package router_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// churnCycles bounds a churn loop whatever the gateway does.
const churnCycles = 20000

// TestPresenceChurnSparesSlowMember: a session that subscribes and
// unsubscribes with presence as fast as it can, beside a member that reads
// nothing and has a small control budget. The member is not closed: once
// its queue holds its share of announcements, the rest are dropped, and
// when it reads again it gets one resync frame and lists the right
// members. The churner is refused past its join rate.
func TestPresenceChurnSparesSlowMember(t *testing.T) {
	const budget = 16 << 10
	b := userBackend(t)
	g := newGateway(t, withHooks(b, func(o *router.HookOptions) { o.Headers = []string{"X-User"} }),
		func(c *gwConfig) {
			// A large item bound, so that only the byte bound counts.
			c.router.Session = session.Options{QueueMessages: 1 << 16, ControlBytes: budget}
			// Enough joins at once to fill any socket buffers, a rate the
			// churner outruns.
			c.router.Presence = router.PresenceOptions{JoinRate: 20, JoinBurst: 400}
		})
	count := func() int64 {
		_, body, _ := g.httpDo(t, "GET", "/v1/presence/room?count=1", nil)
		return num(body, "count")
	}

	slow := g.dialPaused(t)
	slow.send(t, map[string]any{"op": "subscribe", "id": "s", "pattern": "room", "presence": true})
	waitUntil(t, "the slow member to join", func() bool { return count() == 1 })
	_, body, _ := g.httpDo(t, "GET", "/v1/presence/room", nil)
	slowID := body["members"].([]any)[0].(map[string]any)["session"].(string)

	// Large announcements (user and info of 3,000 bytes each), so that
	// the socket buffers fill after a few hundred.
	churner := g.dialUser(t, strings.Repeat("c", 3000))
	sub := map[string]any{"op": "subscribe", "pattern": "room", "presence": true}
	unsub := map[string]any{"op": "unsubscribe", "pattern": "room"}
	dropped := func() float64 {
		return metricValue(t, g.reg, "switchyard_presence_announcements_dropped_total", nil)
	}
	joins, refused, cycles := 0, 0, 0
	var closed int
	deadline := time.Now().Add(waitTimeout)
	for ; cycles < churnCycles && time.Now().Before(deadline); cycles++ {
		r := churner.call(t, sub)
		switch {
		case r["op"] == "subscribed":
			joins++
			churner.mustOK(t, unsub, "unsubscribed")
		case r["code"] == "rate_limited":
			refused++
		default:
			t.Fatalf("churn subscribe: %v", r)
		}
		if cycles%16 != 0 {
			continue
		}
		if _, closed = router.SessionQueues(g.rt); closed > 0 || dropped() > 0 && refused > 0 {
			break
		}
	}
	t.Logf("%d cycles: %d joins, %d refused; %v announcements dropped", cycles, joins, refused, dropped())
	if closed > 0 {
		slow.resume()
		t.Fatalf("the slow member was closed (%v) after %d join+leave cycles of another session", slow.closeStatus(t), joins)
	}
	if refused == 0 {
		t.Fatalf("%d presence joins in %d cycles, none refused", joins, cycles)
	}
	if dropped() == 0 {
		t.Fatal("the slow member's queue never reached its share of announcements")
	}
	if v := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "presence_join_rate"}); v != float64(refused) {
		t.Errorf("presence_join_rate rejections counted %v, want %d", v, refused)
	}

	// bob joins while the slow member's announcements are dropped: only
	// the resync can tell it.
	bob := g.dial(t)
	bob.subscribe(t, "room", "presence", true)
	want := []string{bob.welcome["session"].(string), slowID}
	slices.Sort(want)

	slow.resume()
	if w := slow.next(t); w["op"] != "welcome" || w["session"] != slowID {
		t.Fatalf("slow member's first frame: %v", w)
	}
	if r := slow.next(t); r["id"] != "s" || r["op"] != "subscribed" {
		t.Fatalf("slow member's first frame after the welcome: %v", r)
	}
	for i := 0; ; i++ {
		if i == churnCycles*2 {
			t.Fatal("no resync frame")
		}
		f := slow.next(t)
		if f["op"] == "presence" {
			if f["resync"] != true || f["topic"] != "room" || f["id"] != nil {
				t.Fatalf("resync frame %v", f)
			}
			break
		}
		if f["op"] != "join" && f["op"] != "leave" {
			t.Fatalf("slow member got %v", f)
		}
	}
	p := slow.mustOK(t, map[string]any{"op": "presence", "topic": "room"}, "presence")
	var got []string
	for _, m := range p["members"].([]any) {
		got = append(got, m.(map[string]any)["session"].(string))
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || num(p, "count") != 2 {
		t.Fatalf("members after the resync: %v (count %v), want %v", got, p["count"], want)
	}
	if v := metricValue(t, g.reg, "switchyard_presence_resyncs_total", nil); v < 1 {
		t.Errorf("resyncs counted %v", v)
	}
	// Still open: a round trip (announcements may come first).
	slow.mustOK(t, map[string]any{"op": "ping"}, "pong")
}

// TestPresenceJoinRateDefault: with the default bound, a session's
// presence joins past the burst are refused with rate_limited, counted,
// and the session stays usable.
func TestPresenceJoinRateDefault(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	sub := map[string]any{"op": "subscribe", "pattern": "room", "presence": true}
	unsub := map[string]any{"op": "unsubscribe", "pattern": "room"}
	start := time.Now()
	joins, refused := 0, 0
	for range 2 * router.DefaultPresenceJoinBurst {
		r := c.call(t, sub)
		if r["op"] == "subscribed" {
			joins++
			c.mustOK(t, unsub, "unsubscribed")
			continue
		}
		if r["code"] != "rate_limited" || !strings.Contains(r["message"].(string), "presence joins are limited to 10 per second") {
			t.Fatalf("refusal %v", r)
		}
		refused++
	}
	// The bucket's burst plus what refilled meanwhile.
	if most := router.DefaultPresenceJoinBurst + 1 + int(time.Since(start).Seconds()*router.DefaultPresenceJoinRate); joins > most || refused == 0 {
		t.Fatalf("%d joins, %d refused; at most %d allowed", joins, refused, most)
	}
	if v := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "presence_join_rate"}); v != float64(refused) {
		t.Errorf("presence_join_rate rejections counted %v, want %d", v, refused)
	}
	// Without presence, the same subscribe is not limited.
	c.subscribe(t, "room")
}

// listGate holds the first member listing (PresenceList with a limit)
// until released; counts (limit 0) pass.
type listGate struct {
	engine.Engine
	p       engine.Presence
	entered chan struct{}
	release chan struct{}
	once    sync.Once
}

func (l *listGate) PresenceJoin(ctx context.Context, m engine.PresenceMember) error {
	return l.p.PresenceJoin(ctx, m)
}

func (l *listGate) PresenceLeave(ctx context.Context, topic, session string) error {
	return l.p.PresenceLeave(ctx, topic, session)
}

func (l *listGate) WatchPresence(obs engine.PresenceObserver) func() { return l.p.WatchPresence(obs) }

func (l *listGate) PresenceList(ctx context.Context, topic string, limit int) ([]engine.PresenceMember, int, error) {
	if limit > 0 {
		l.once.Do(func() {
			close(l.entered)
			<-l.release
		})
	}
	return l.p.PresenceList(ctx, topic, limit)
}

// TestPresenceListOrderedWithAnnouncements: a join made while a member's
// presence op is listing reaches the member after the reply, so that it
// applies to the list the reply carries.
func TestPresenceListOrderedWithAnnouncements(t *testing.T) {
	gate := &listGate{entered: make(chan struct{}), release: make(chan struct{})}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine {
			gate.Engine, gate.p = e, e.(engine.Presence)
			return gate
		}
	})
	ann := g.dial(t)
	ann.subscribe(t, "room", "presence", true)
	ann.send(t, map[string]any{"op": "presence", "id": "list", "topic": "room"})
	select {
	case <-gate.entered:
	case <-time.After(waitTimeout):
		t.Fatal("the presence op did not list")
	}
	bob := g.dial(t)
	bob.subscribe(t, "room", "presence", true) // announced to ann while it lists
	close(gate.release)
	if r := ann.next(t); r["id"] != "list" {
		t.Fatalf("first frame after the listing %v, want its reply", r)
	}
	if j := ann.nextOp(t, "join"); j["session"] != bob.welcome["session"] {
		t.Fatalf("join %v", j)
	}
}
