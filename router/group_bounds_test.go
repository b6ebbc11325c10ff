package router_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// TestPollSprayIsBounded: one client polling thousands of distinct group
// names (each poll makes a pull member, which leases a window of the
// topic's records) is refused once it holds its limit of pull members,
// with a clear error, and the gateway stays usable for it in the groups it
// has.
func TestPollSprayIsBounded(t *testing.T) {
	g := newGateway(t)
	for i := range 200 {
		if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "spray", "data": i}); code != 200 {
			t.Fatalf("publish: %d %v", code, body)
		}
	}
	const attack = 3000
	made, refused := 0, map[string]any(nil)
	for i := range attack {
		code, body, _ := g.httpDo(t, "POST", fmt.Sprintf("/v1/groups/spray-%d/poll", i), map[string]any{"pattern": "spray", "max": 1})
		if code != 200 {
			if code != 429 || body["code"] != "too_many_subscriptions" {
				t.Fatalf("poll %d: %d %v, want 429 too_many_subscriptions", i, code, body)
			}
			refused = body
			break
		}
		made++
	}
	t.Logf("%d pull members made before the refusal %v", made, refused)
	if refused == nil {
		t.Fatalf("one client made %d pull members (and groups) unrefused", made)
	}
	// The groups it has still serve it.
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/spray-0/poll", map[string]any{"pattern": "spray", "max": 1}); code != 200 {
		t.Fatalf("poll of a group it holds: %d %v", code, body)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "pull_members_per_client"}); got != 1 {
		t.Errorf("pull_members_per_client refusals counted %v, want 1", got)
	}
	// Pull members it stopped polling leave after their idle minute, and
	// give their room back.
	router.ExpirePulls(g.rt, time.Now().Add(2*time.Minute))
	if code, body, _ := g.httpDo(t, "POST", fmt.Sprintf("/v1/groups/spray-%d/poll", attack), map[string]any{"pattern": "spray", "max": 1}); code != 200 {
		t.Fatalf("poll after the idle members left: %d %v", code, body)
	}
}

// TestSessionLeasesAreBounded: a session that reads but never acks, in
// many groups with a wide window each, holds at most its lease bound
// across its memberships; past the bound a subscribe is refused with a
// clear error, and acking lets deliveries go on.
func TestSessionLeasesAreBounded(t *testing.T) {
	const queue = 64
	g := newGateway(t, func(c *gwConfig) { c.router.Session.QueueMessages = queue })
	pub := g.dial(t)
	const records = 300
	for i := range records {
		pub.publish(t, "hoard", i)
	}
	c := g.dial(t)
	joined := 0
	for i := range 40 {
		m := c.call(t, map[string]any{"op": "subscribe", "pattern": "hoard", "group": fmt.Sprintf("hoard-%d", i), "max_in_flight": 1000})
		if m["op"] != "subscribed" {
			if m["code"] != "too_many_subscriptions" {
				t.Fatalf("subscribe %d: %v", i, m)
			}
			t.Logf("subscribe %d refused: %v", i, m["message"])
			break
		}
		joined++
	}
	leased := 0
	for i := range joined {
		_, grp, _ := g.httpDo(t, "GET", fmt.Sprintf("/v1/groups/hoard-%d", i), nil)
		for _, p := range grp["partitions"].([]any) {
			leased += int(num(p.(map[string]any), "in_flight"))
		}
	}
	t.Logf("%d memberships hold %d leases (queue bound %d)", joined, leased, queue)
	// Four times the queue bound is what the session's reliable items may
	// reach before it is closed: its leases stay within that.
	if leased > 4*queue {
		t.Fatalf("one session holds %d leases over %d memberships; want at most %d", leased, joined, 4*queue)
	}
	// The first group's deliveries paused at its window; acking one of
	// them brings the next record.
	_, grp, _ := g.httpDo(t, "GET", "/v1/groups/hoard-0", nil)
	window := num(grp["partitions"].([]any)[0].(map[string]any), "in_flight")
	if window == 0 || window >= records {
		t.Fatalf("hoard-0 holds %d of %d records leased", window, records)
	}
	var first map[string]any
	for first == nil {
		if m := c.next(t); m["op"] == "message" && m["group"] == "hoard-0" {
			first = m
		}
	}
	c.send(t, map[string]any{"op": "ack", "group": "hoard-0", "topic": "hoard", "partition": first["partition"], "offset": first["offset"]})
	for {
		m := c.next(t) // bounded by waitTimeout
		if m["op"] == "message" && m["group"] == "hoard-0" && num(m, "offset") >= window {
			break
		}
	}
}

// TestPullMembersBoundedPerGateway: past --max-pull-members a poll that
// would make another pull member is refused, whoever asks.
func TestPullMembersBoundedPerGateway(t *testing.T) {
	const most = 3
	g := newGateway(t, func(c *gwConfig) {
		c.router.Groups.MaxPullMembers = most
		c.router.Groups.MaxPullMembersPerClient = -1
	})
	for i := range most {
		if code, body, _ := g.httpDo(t, "POST", fmt.Sprintf("/v1/groups/few-%d/poll", i), map[string]any{"pattern": "few"}); code != 200 {
			t.Fatalf("poll %d: %d %v", i, code, body)
		}
	}
	code, body, _ := g.httpDo(t, "POST", "/v1/groups/one-more/poll", map[string]any{"pattern": "few"})
	if code != 429 || body["code"] != "too_many_subscriptions" {
		t.Fatalf("poll past the gateway's bound: %d %v", code, body)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "pull_members"}); got != 1 {
		t.Errorf("pull_members refusals counted %v, want 1", got)
	}
	if got := metricValue(t, g.reg, "switchyard_pull_members", nil); got != most {
		t.Errorf("switchyard_pull_members = %v, want %d", got, most)
	}
}
