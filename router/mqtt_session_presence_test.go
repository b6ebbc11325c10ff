package router_test

// Presence kept by MQTT persistent sessions (docs/mqtt.md, "Presence and
// $sys stats"; mqtt_presence.go): a filter that asked presence at
// SUBSCRIBE joins its topic's presence set again when the session is
// restored, on either engine, through a takeover on one node or across
// nodes; a stored record without the field restores without presence.

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// subscribePresence subscribes filter at QoS 1 with the user property
// presence=true and wants it granted.
func subscribePresence(t *testing.T, c *paho.Client, filter string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	sa, err := c.Subscribe(ctx, &paho.Subscribe{
		Properties:    &paho.SubscribeProperties{User: paho.UserProperties{{Key: "presence", Value: "true"}}},
		Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if err != nil || len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		t.Fatalf("SUBACK %v, %v: want %s granted at QoS 1", sa, err, filter)
	}
}

// presenceSessions lists the session ids in topic's presence set.
func presenceSessions(t *testing.T, g *gateway, topic string) []string {
	t.Helper()
	st, body, _ := g.httpDo(t, "GET", "/v1/presence/"+topic, nil)
	if st != 200 {
		t.Fatalf("GET /v1/presence/%s: %d %v", topic, st, body)
	}
	members, _ := body["members"].([]any)
	var ids []string
	for _, m := range members {
		mm, _ := m.(map[string]any)
		id, _ := mm["session"].(string)
		ids = append(ids, id)
	}
	if n := num(body, "count"); n != int64(len(ids)) {
		t.Fatalf("presence of %s: count %d, members %v", topic, n, members)
	}
	return ids
}

// waitPresence waits until topic's presence set holds exactly n sessions,
// none of them in gone, and returns them.
func waitPresence(t *testing.T, g *gateway, topic string, n int, gone ...string) []string {
	t.Helper()
	var ids []string
	deadline := time.Now().Add(waitTimeout)
	for {
		ids = presenceSessions(t, g, topic)
		if len(ids) == n && !slices.ContainsFunc(ids, func(id string) bool { return slices.Contains(gone, id) }) {
			return ids
		}
		if time.Now().After(deadline) {
			t.Fatalf("presence of %s: sessions %v, want %d (none of %v)", topic, ids, n, gone)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// restored waits until c's session is restored: the restore runs before
// the first packet after the CONNACK is read, so a SUBACK follows it.
func restored(t *testing.T, c *mqttClient) {
	t.Helper()
	if rc := c.subscribe(t, "restored/barrier", 0); rc != 0 {
		t.Fatalf("SUBACK %#x", rc)
	}
}

// TestMQTTPersistentSessionPresence: a persistent MQTT 5 session's filter
// that asked presence joins the topic's presence set again on reconnect
// (its other filter does not), and its messages resume as before; a 3.1.1
// connection resuming the session does not join (MQTT 3.1.1 cannot ask
// presence), and saves the filter without it.
func TestMQTTPersistentSessionPresence(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "sp-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", "sp-1", false, 600)
	subscribePresence(t, c.v5, "sp/room")
	if rc := c.subscribe(t, "sp/other", 1); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	first := waitPresence(t, g, "sp.room", 1)
	c.leave(t, g, "sp-1")
	waitPresence(t, g, "sp.room", 0)
	pub.publish(t, "sp/room", 1, "away")

	c2, present := dialSession(t, g, 5, "tcp", "sp-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restored(t, c2)
	if ids := presenceSessions(t, g, "sp.room"); len(ids) != 1 || ids[0] == first[0] {
		t.Fatalf("presence of sp.room after the session was restored: %v, want the new connection alone "+
			"(the filter asked presence at SUBSCRIBE; the first connection was %s)", ids, first[0])
	}
	if ids := presenceSessions(t, g, "sp.other"); len(ids) != 0 {
		t.Fatalf("presence of sp.other: %v, want none (never asked)", ids)
	}
	c2.expectPayloads(t, "away")
	c2.leave(t, g, "sp-1")
	waitPresence(t, g, "sp.room", 0)

	c3, present := dialSession(t, g, 4, "tcp", "sp-1", false, 0)
	if !present {
		t.Fatal("3.1.1: Session Present 0")
	}
	restored(t, c3)
	if ids := presenceSessions(t, g, "sp.room"); len(ids) != 0 {
		t.Fatalf("presence of sp.room resumed by MQTT 3.1.1: %v, want none", ids)
	}
	c3.leave(t, g, "sp-1")
	rec, ok, err := g.eng.(engine.MQTTSessionStore).LoadMQTTSession(context.Background(), "sp-1", time.Now())
	if err != nil || !ok {
		t.Fatalf("stored session: %v %v", ok, err)
	}
	for _, sb := range rec.Subs {
		if sb.Presence {
			t.Fatalf("the 3.1.1 connection saved %+v with presence", sb)
		}
	}
}

// TestMQTTPersistentSessionPresenceOldRecord: a stored record without
// the presence field (as older versions stored it) restores its filter
// without presence.
func TestMQTTPersistentSessionPresenceOldRecord(t *testing.T) {
	g := newGateway(t, withMQTT)
	oldRecordRestores(t, g, g, "spo-1")
}

// oldRecordRestores stores a record of client id id through a's store
// and resumes it through b.
func oldRecordRestores(t *testing.T, a, b *gateway, id string) {
	t.Helper()
	st := a.eng.(engine.MQTTSessionStore)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rec := engine.MQTTSession{ClientID: id, Owner: "old-owner", Claim: true, Expiry: 600 * time.Second,
		ExpiresAt: time.Now().Add(600 * time.Second), Epoch: a.eng.Epoch(),
		Subs: []engine.MQTTSubscription{{Filter: "spo/room", QoS: 1, Since: time.Now()}}}
	if err := st.SaveMQTTSession(ctx, rec, engine.MQTTSessionLimits{}); err != nil {
		t.Fatal(err)
	}
	c, present := dialSession(t, b, 5, "tcp", id, false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restored(t, c)
	if ids := presenceSessions(t, b, "spo.room"); len(ids) != 0 {
		t.Fatalf("presence of spo.room from a record without the field: %v, want none", ids)
	}
	pub, _ := dialSession(t, b, 5, "tcp", id+"-pub", true, 0)
	pub.publish(t, "spo/room", 1, "live")
	c.expectPayloads(t, "live")
}

// TestMQTTPersistentSessionPresenceTakeover: a connection that takes over
// a live session of the same node leaves the presence set with the new
// connection in it once, and the old one out.
func TestMQTTPersistentSessionPresenceTakeover(t *testing.T) {
	g := newGateway(t, withMQTT)
	presenceTakeover(t, g, g, "spt-1")
}

// presenceTakeover subscribes with presence through a, takes the session
// over through b, and checks the presence set.
func presenceTakeover(t *testing.T, a, b *gateway, id string) {
	t.Helper()
	old := dialTaken(t, a, id, false, 600)
	subscribePresence(t, old.c, "spt/room")
	first := waitPresence(t, b, "spt.room", 1)
	nw, present := dialSession(t, b, 5, "tcp", id, false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	old.expectTakenOver(t)
	restored(t, nw)
	ids := waitPresence(t, b, "spt.room", 1, first...)
	// Still one, through either node, once the old connection is closed.
	select {
	case <-old.c.Done():
	case <-time.After(waitTimeout):
		t.Fatal("the connection taken over was not closed")
	}
	for _, g := range []*gateway{a, b} {
		if got := waitPresence(t, g, "spt.room", 1, first...); !slices.Equal(got, ids) {
			t.Fatalf("presence of spt.room: %v, want %v", got, ids)
		}
	}
	nw.leave(t, b, id)
	waitPresence(t, b, "spt.room", 0)
}

// TestMQTTPersistentSessionPresenceRefused: a filter whose presence a
// topic policy refuses by the time its session is restored is restored
// without presence (there is no SUBACK to refuse it with): the refusal is
// counted as a native one, and the filter delivers.
func TestMQTTPersistentSessionPresenceRefused(t *testing.T) {
	g := newGateway(t, withMQTT)
	c, _ := dialSession(t, g, 5, "tcp", "spr-1", false, 600)
	subscribePresence(t, c.v5, "spr/room")
	waitPresence(t, g, "spr.room", 1)
	c.leave(t, g, "spr-1")
	if err := g.rt.Reload(router.Options{TopicPolicies: []router.TopicPolicy{{Pattern: "spr.#", Presence: boolPtr(false)}}}); err != nil {
		t.Fatal(err)
	}
	forbidden := func() float64 {
		return metricValue(t, g.reg, "switchyard_forbidden_total", map[string]string{"op": "presence"})
	}
	before := forbidden()
	c2, present := dialSession(t, g, 5, "tcp", "spr-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restored(t, c2)
	if ids := presenceSessions(t, g, "spr.room"); len(ids) != 0 {
		t.Fatalf("presence of spr.room with presence off by policy: %v, want none", ids)
	}
	if n := forbidden() - before; n != 1 {
		t.Fatalf("switchyard_forbidden_total{op=presence} rose by %v, want 1", n)
	}
	pub, _ := dialSession(t, g, 5, "tcp", "spr-pub", true, 0)
	pub.publish(t, "spr/room", 1, "live")
	c2.expectPayloads(t, "live")
}

// TestMQTTPersistentSessionPresenceAcrossNodes: on JetStream a session
// that asked presence through one node joins again when it resumes
// through another, and a takeover across nodes leaves it in the set once.
func TestMQTTPersistentSessionPresenceAcrossNodes(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := newJSGateway(t, url, prefix), newJSGateway(t, url, prefix)
	c, _ := dialSession(t, a, 5, "tcp", "spn-1", false, 600)
	subscribePresence(t, c.v5, "spn/room")
	first := waitPresence(t, b, "spn.room", 1)
	c.leave(t, a, "spn-1")
	waitPresence(t, b, "spn.room", 0)
	c2, present := dialSession(t, b, 5, "tcp", "spn-1", false, 600)
	if !present {
		t.Fatal("Session Present 0 through the other node")
	}
	restored(t, c2)
	// Each node's view of the set follows the store: wait for it.
	ids := waitPresence(t, b, "spn.room", 1, first...)
	if got := waitPresence(t, a, "spn.room", 1, first...); !slices.Equal(got, ids) {
		t.Fatalf("presence of spn.room through the first node: %v, want %v", got, ids)
	}
	c2.leave(t, b, "spn-1")
	waitPresence(t, a, "spn.room", 0)

	presenceTakeover(t, a, b, "spn-2")
	oldRecordRestores(t, a, b, "spn-3")
}

// TestMQTTPersistentSessionPresenceRateRefused: a session restored through
// a node whose presence join burst is smaller than its filters that asked
// presence joins with the first ones; the others are restored without
// presence (no SUBACK to refuse them with), counted as a 0x97 would be,
// and deliver.
func TestMQTTPersistentSessionPresenceRateRefused(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a := newJSGateway(t, url, prefix)
	b := newJSGateway(t, url, prefix, func(o *router.Options) {
		o.Presence.JoinRate, o.Presence.JoinBurst = 0.001, 1 // one join for the connection's life
	})
	c, _ := dialSession(t, a, 5, "tcp", "sprr-1", false, 600)
	subscribePresence(t, c.v5, "sprr/1")
	subscribePresence(t, c.v5, "sprr/2")
	c.leave(t, a, "sprr-1")
	quota := func() float64 {
		return metricValue(t, b.reg, "switchyard_mqtt_refused_total", map[string]string{"reason": "quota_exceeded"})
	}
	before := quota()
	c2, present := dialSession(t, b, 5, "tcp", "sprr-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	restored(t, c2)
	// The filters are restored in the record's order: either may join.
	var without string
	waitUntil(t, "one of sprr.1 and sprr.2 has the session", func() bool {
		n1, n2 := len(presenceSessions(t, b, "sprr.1")), len(presenceSessions(t, b, "sprr.2"))
		if n1+n2 > 1 {
			t.Fatalf("presence of sprr.1 and sprr.2: %d and %d members, want one join (burst 1)", n1, n2)
		}
		without = map[bool]string{true: "sprr/2", false: "sprr/1"}[n1 == 1]
		return n1+n2 == 1
	})
	if n := quota() - before; n != 1 {
		t.Fatalf("switchyard_mqtt_refused_total{reason=quota_exceeded} rose by %v, want 1", n)
	}
	pub, _ := dialSession(t, b, 5, "tcp", "sprr-pub", true, 0)
	pub.publish(t, without, 1, "live")
	c2.expectPayloads(t, "live")
}
