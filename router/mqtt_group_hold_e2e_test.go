package router_test

// Held shared-subscription deliveries (mqtt_group.go) under adverse
// clients: what a session holds for want of room in its window stays
// bounded by its live memberships, and a plain delivery waiting for the
// same window is not overtaken for ever by group deliveries.

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// TestMQTTGroupHeldBoundedAcrossResubscribe: a client that keeps its
// window full (one plain QoS 1 delivery never acknowledged, Receive
// Maximum 1) and subscribes to and unsubscribes from a shared filter
// again and again, a record delivered to each membership, holds no more
// group deliveries than its live memberships may: once it unsubscribed,
// none. The held deliveries of a subscription that ended are only let go
// when a PUBACK frees the window, which this client never sends.
func TestMQTTGroupHeldBoundedAcrossResubscribe(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	r := connectWindow(t, g, "hr-member", 1, "hr/plain")
	pub := g.dial(t)
	pub.publish(t, "hr.plain", "fills the window, never acknowledged")
	if p := r.expect(t, packets.Publish); p.TopicName != "hr/plain" {
		t.Fatalf("got %s", p.TopicName)
	}
	const cycles = 20
	for i := range cycles {
		if ack := r.subscribeQoS1(t, "$share/hr/hr/jobs"); len(ack.ReasonCodes) != 1 || ack.ReasonCodes[0] != 1 {
			t.Fatalf("cycle %d: SUBACK %v", i, ack.ReasonCodes)
		}
		pub.publish(t, "hr.jobs", fmt.Sprint("job-", i))
		waitLeased(t, g, "hr", 1)
		r.noPublishYet(t) // held: the window is full
		r.unsubscribe(t, 2, "$share/hr/hr/jobs")
	}
	if n := router.MQTTGroupHeld(g.rt); n > 1 {
		t.Fatalf("the session holds %d group deliveries after %d subscribe/unsubscribe cycles with no membership left; want at most 1 (bounded by its live memberships' leases)", n, cycles)
	}
}

// TestMQTTGroupHeldPlainNotStarved: a plain QoS 1 delivery that waits for
// the window (Receive Maximum 2, one slot taken by an unacknowledged plain
// delivery) while a shared subscription has a backlog gets a slot before
// the group deliveries of records published after it. Every PUBACK of a
// group delivery frees a slot that the next held group delivery takes
// first, so the plain one waits for as long as the group has records.
func TestMQTTGroupHeldPlainNotStarved(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	r := connectWindow(t, g, "hs-member", 2, "hs/plain", "$share/hs/hs/jobs")
	pub := g.dial(t)
	pub.publish(t, "hs.plain", "p0")
	if p := r.expect(t, packets.Publish); p.TopicName != "hs/plain" {
		t.Fatalf("got %s", p.TopicName)
	}
	pub.publish(t, "hs.jobs", "before-0")
	pub.publish(t, "hs.jobs", "before-1")
	first := r.expect(t, packets.Publish) // before-0 fills the window; before-1 is held
	if first.TopicName != "hs/jobs" {
		t.Fatalf("got %s %q", first.TopicName, first.Payload)
	}
	waitLeased(t, g, "hs", 2)
	pub.publish(t, "hs.plain", "p1") // waits for the window
	r.noPublishYet(t)
	const after = 10
	for i := range after {
		pub.publish(t, "hs.jobs", fmt.Sprint("after-", i))
	}
	got := []string{string(first.Payload)}
	owed := first.PacketID
	for range after + 2 {
		r.puback(t, owed)
		p := r.expect(t, packets.Publish)
		got = append(got, string(p.Payload))
		if p.TopicName == "hs/plain" {
			if string(p.Payload) != `"p1"` {
				t.Fatalf("got plain %q, want p1", p.Payload)
			}
			if len(got) > 3 {
				t.Fatalf("order %v: the plain delivery p1 came after %d group deliveries of records published after it", got, len(got)-3)
			}
			return
		}
		owed = p.PacketID
	}
	t.Fatalf("order %v: the plain delivery p1 never got a slot while the group had records", got)
}

// TestMQTTGroupHeldBoundKeepsLiveAfterSeek: a seek that drops the lease of
// one held delivery and leases the next record of its partition to the
// same member must not make the session drop another partition's held
// delivery, whose lease is live. Receive Maximum 1 (full with a plain
// delivery never acknowledged until the end), a topic of two partitions:
// the member's window is one record per partition, two leases. job-0
// (partition a) and job-1 (partition b) are held; a seek of partition b
// past job-1 drops its lease and leases job-3; held past the membership's
// window, the oldest held, job-0, is dropped though its lease is live,
// where job-1, whose lease the seek dropped, stays and is written. job-0
// then waits for the group's ack timeout (a spent attempt) though the
// client acknowledges everything it gets.
func TestMQTTGroupHeldBoundKeepsLiveAfterSeek(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	if code, _, _ := g.httpDo(t, "POST", "/v1/topics", map[string]any{"name": "hk.jobs", "partitions": 2, "partitioner": "round_robin"}); code != 201 {
		t.Fatal("create failed")
	}
	r := connectWindow(t, g, "hk-member", 1, "hk/plain", "$share/hk/hk/jobs")
	pub := g.dial(t)
	pub.publish(t, "hk.plain", "fills the window")
	plain := r.expect(t, packets.Publish)
	if plain.TopicName != "hk/plain" {
		t.Fatalf("got %s", plain.TopicName)
	}
	part := map[string]any{}
	for i := range 4 { // round robin: job-0 and job-2 on one partition, job-1 and job-3 on the other
		m := pub.publish(t, "hk.jobs", fmt.Sprint("job-", i))
		part[fmt.Sprint("job-", i)] = m["partition"]
	}
	waitLeased(t, g, "hk", 2) // job-0 and job-1, both held
	r.noPublishYet(t)
	if code, body, _ := g.httpDo(t, "POST", "/v1/groups/hk/seek", map[string]any{"topic": "hk.jobs", "partition": part["job-1"], "offset": 1}); code != 200 {
		t.Fatalf("seek: %d %v", code, body)
	}
	waitLeased(t, g, "hk", 2) // job-0 and job-3
	r.noPublishYet(t)
	var got []string
	owed := plain.PacketID
	for range 8 {
		// With the window full, each PUBACK lets one held delivery go, if
		// any is held.
		held := router.MQTTGroupHeld(g.rt)
		r.puback(t, owed)
		if held == 0 {
			break
		}
		p := r.expect(t, packets.Publish)
		got = append(got, string(p.Payload))
		owed = p.PacketID
	}
	for _, p := range got {
		if p == `"job-0"` {
			return
		}
	}
	t.Fatalf("the client acknowledged everything it got, %v, and never got job-0, whose lease is live (partitions %v)", got, part)
}

// newMQTTGatewayOn is newGatewayOn with the MQTT listener open.
func newMQTTGatewayOn(t *testing.T, eng *memengine.Engine) *gateway {
	t.Helper()
	reg := prometheus.NewRegistry()
	opts := router.Options{Engine: eng, Registry: reg, StatsInterval: -1}
	opts.MQTT.Addr = "127.0.0.1:0"
	rt, err := router.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(newAPICheck(t).wrap(rt))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := rt.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		srv.Close()
	})
	return &gateway{t: t, eng: eng, rt: rt, srv: srv, reg: reg}
}

// TestMQTTGroupHeldShutdownNotAttempt: a group delivery an MQTT member
// holds for want of room in its window when its gateway shuts down never
// reached the wire, so the hand-back does not count it as an attempt
// (shutdown.go: at worst a client sees a record once more than its
// attempt number says, never fewer): a member on another gateway gets it
// as its first attempt.
func TestMQTTGroupHeldShutdownNotAttempt(t *testing.T) {
	eng := memengine.New(memengine.Options{Policy: engine.GroupPolicy{MaxAttempts: 2, AckTimeout: time.Hour}})
	t.Cleanup(func() { _ = eng.Close(context.Background()) })
	a, b := newMQTTGatewayOn(t, eng), newGatewayOn(t, eng)
	r := connectWindow(t, a, "sd-member", 1, "sd/plain", "$share/sd/sd/jobs")
	pub := a.dial(t)
	pub.publish(t, "sd.plain", "fills the window")
	if p := r.expect(t, packets.Publish); p.TopicName != "sd/plain" {
		t.Fatalf("got %s", p.TopicName)
	}
	pub.publish(t, "sd.jobs", "held")
	waitLeased(t, a, "sd", 1)
	waitUntil(t, "A's writer to take the held delivery's place in its queue", func() bool {
		return router.UnsentGroupDeliveries(a.rt) == 0 && router.MQTTGroupHeld(a.rt) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := a.rt.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	c := b.dial(t)
	c.subscribe(t, "sd.jobs", "group", "sd")
	m := c.nextOp(t, "message")
	if num(m, "attempt") != 1 {
		t.Fatalf("after a clean shutdown got %v, want attempt 1: the held delivery never reached the client", m)
	}
}

// TestMQTTGroupHeldWindowUnderLoad: a client that keeps its window
// (Receive Maximum 3) full, acknowledging its oldest delivery only when it
// has three, while plain records and the records of two shared
// subscriptions arrive together: no packet identifier is given twice
// while in flight, each stream arrives in order without DUP, and every
// record arrives once. (The client counts its own unacknowledged
// PUBLISHes, which cannot see a PUBLISH written while its PUBACK was on
// the way; the Receive Maximum itself is checked by the window tests.)
func TestMQTTGroupHeldWindowUnderLoad(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	const rm = 3
	r := connectWindow(t, g, "hl-member", rm, "hl/plain", "$share/hla/hl/ja", "$share/hlb/hl/jb")
	const n = 60
	done := make(chan error, 1)
	t.Cleanup(func() { <-done }) // before the gateway closes
	// The publisher; its three streams interleave.
	go func() {
		defer close(done)
		for i := range n {
			for _, topic := range []string{"hl.plain", "hl.ja", "hl.jb"} {
				body := strings.NewReader(fmt.Sprintf(`{"topic":%q,"data":%d}`, topic, i))
				resp, err := g.srv.Client().Post(g.srv.URL+"/v1/publish", "application/json", body)
				if err != nil {
					done <- err
					return
				}
				resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					done <- fmt.Errorf("publish %s %d: %s", topic, i, resp.Status)
					return
				}
			}
		}
	}()
	next := map[string]int{}
	var owed []uint16
	inFlight := map[uint16]bool{}
	for got := 0; got < 3*n; got++ {
		p := r.expect(t, packets.Publish)
		if inFlight[p.PacketID] {
			t.Fatalf("packet identifier %d given again while in flight", p.PacketID)
		}
		inFlight[p.PacketID] = true
		owed = append(owed, p.PacketID)
		if len(owed) > rm {
			t.Fatalf("%d unacknowledged PUBLISHes, Receive Maximum %d", len(owed), rm)
		}
		if want := fmt.Sprint(next[p.TopicName]); string(p.Payload) != want || p.FixedHeader.Dup {
			t.Fatalf("%s: got %s dup=%v, want %s", p.TopicName, p.Payload, p.FixedHeader.Dup, want)
		}
		next[p.TopicName]++
		if len(owed) == rm {
			r.puback(t, owed[0])
			delete(inFlight, owed[0])
			owed = owed[1:]
		}
	}
	for _, id := range owed {
		r.puback(t, id)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitLeased(t, g, "hla", 0)
	waitLeased(t, g, "hlb", 0)
	r.noPublishYet(t)
}
