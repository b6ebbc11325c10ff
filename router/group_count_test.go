package router_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/router"
)

// joinAndLeave subscribes c to a group of pattern "spray" and, when that
// works, unsubscribes at once: the group stays, with no member. It returns
// the subscribe's reply.
func joinAndLeave(t *testing.T, c *client, group string) map[string]any {
	t.Helper()
	m := c.call(t, map[string]any{"op": "subscribe", "pattern": "spray", "group": group})
	if m["op"] == "subscribed" {
		c.mustOK(t, map[string]any{"op": "unsubscribe", "pattern": "spray", "group": group}, "unsubscribed")
	}
	return m
}

// TestGroupSprayIsBoundedPerClient: a client joining ever-new group names
// over WebSocket (and leaving each at once) is refused with
// too_many_subscriptions once it has made its limit of groups; rejoining
// a group it made still works; a poll of a new group counts against the
// same limit; a group deleted, or expired after its idle TTL, stops
// counting.
func TestGroupSprayIsBoundedPerClient(t *testing.T) {
	const most, attack = 5, 200
	clock := enginetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	g := newGateway(t, func(c *gwConfig) {
		c.router.Groups.MaxGroupsPerClient = most
		c.engine.Clock = clock
		c.engine.Policy = engine.GroupPolicy{IdleTTL: time.Hour}
	})
	c := g.dial(t)
	made := 0
	for i := range attack {
		m := joinAndLeave(t, c, fmt.Sprintf("spray-%d", i))
		if m["op"] != "subscribed" {
			if m["code"] != "too_many_subscriptions" {
				t.Fatalf("subscribe %d: %v, want too_many_subscriptions", i, m)
			}
			t.Logf("refused after %d groups: %v", made, m["message"])
			break
		}
		made++
	}
	if made != most {
		t.Fatalf("one client made %d groups (limit %d)", made, most)
	}
	if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": "groups_per_client"}); got != 1 {
		t.Errorf("groups_per_client refusals counted %v, want 1", got)
	}
	if got := metricValue(t, g.reg, "switchyard_groups_made", nil); got != most {
		t.Errorf("switchyard_groups_made = %v, want %d", got, most)
	}
	if m := joinAndLeave(t, c, "spray-0"); m["op"] != "subscribed" {
		t.Fatalf("rejoining a group it made: %v", m)
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/by-poll/poll", map[string]any{"pattern": "spray"}); code != 429 || body["code"] != "too_many_subscriptions" {
		t.Fatalf("poll of a new group past the limit: %d %v", code, body)
	}
	// A deleted group gives its room back.
	if code, body, _ := g.httpDo(t, "DELETE", "/v1/groups/spray-0", nil); code != 204 {
		t.Fatalf("delete: %d %v", code, body)
	}
	if m := joinAndLeave(t, c, fmt.Sprintf("spray-%d", attack)); m["op"] != "subscribed" {
		t.Fatalf("a new group after deleting one: %v", m)
	}
	// Abandoned groups expire after their idle TTL and stop counting.
	clock.Advance(2 * time.Hour)
	deadline := time.Now().Add(waitTimeout)
	for {
		groups, err := g.eng.Groups(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if len(groups) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups left after their idle TTL", len(groups))
		}
		time.Sleep(time.Millisecond) // the engine's expiry runs on timer goroutines
	}
	router.SweepGroups(g.rt)
	if got := metricValue(t, g.reg, "switchyard_groups_made", nil); got != 0 {
		t.Errorf("switchyard_groups_made = %v after every group expired, want 0", got)
	}
	for i := range most {
		if m := joinAndLeave(t, c, fmt.Sprintf("again-%d", i)); m["op"] != "subscribed" {
			t.Fatalf("new group %d after the others expired: %v", i, m)
		}
	}
}

// TestGroupsBoundedPerGateway: past --max-groups, or --max-group-bytes, a
// subscribe that would make another group is refused, whoever asks, and
// the groups that exist stay joinable.
func TestGroupsBoundedPerGateway(t *testing.T) {
	for _, tc := range []struct {
		name  string
		set   func(*router.GroupBounds)
		most  int
		limit string
	}{
		{"count", func(b *router.GroupBounds) { b.MaxGroups = 3 }, 3, "groups"},
		{"bytes", func(b *router.GroupBounds) { b.MaxGroupBytes = 9000 }, 2, "group_bytes"}, // 4 KiB and the names each
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, func(c *gwConfig) {
				c.router.Groups.MaxGroupsPerClient = -1
				tc.set(&c.router.Groups)
			})
			c := g.dial(t)
			for i := range tc.most {
				if m := joinAndLeave(t, c, fmt.Sprintf("few-%d", i)); m["op"] != "subscribed" {
					t.Fatalf("subscribe %d: %v", i, m)
				}
			}
			other := g.dial(t)
			if m := joinAndLeave(t, other, "one-more"); m["code"] != "too_many_subscriptions" {
				t.Fatalf("a group past the gateway's bound: %v", m)
			}
			if got := metricValue(t, g.reg, "switchyard_limit_rejections_total", map[string]string{"limit": tc.limit}); got != 1 {
				t.Errorf("%s refusals counted %v, want 1", tc.limit, got)
			}
			if m := joinAndLeave(t, other, "few-0"); m["op"] != "subscribed" {
				t.Fatalf("joining an existing group: %v", m)
			}
		})
	}
}
