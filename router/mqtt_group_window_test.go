package router_test

// A shared-subscription (group) delivery that finds the MQTT session's
// in-flight window full (mqtt_group.go): held by the session until a
// PUBACK or PUBCOMP makes room, never dropped to the group's ack timeout.

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
)

// withLongAckTimeout gives the group an ack timeout far past every wait
// of these tests and two attempts: a delivery the gateway left to the ack
// timeout never arrives within waitTimeout, and a second such loss would
// make a dead letter.
func withLongAckTimeout(c *gwConfig) {
	c.engine.Policy = engine.GroupPolicy{AckTimeout: time.Minute, MaxAttempts: 2,
		BackoffMin: time.Millisecond, BackoffMax: time.Millisecond}
}

// connectWindow connects a raw MQTT 5 client with Receive Maximum rm and
// subscribes it at QoS 1 to the filters, in one SUBSCRIBE.
func connectWindow(t *testing.T, g *gateway, id string, rm uint16, filters ...string) *rawMQTT {
	t.Helper()
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 60)
	pk.Properties.ReceiveMaximum = rm
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	want := bytes.Repeat([]byte{1}, len(filters))
	if ack := r.subscribeQoS1(t, filters...); !bytes.Equal(ack.ReasonCodes, want) {
		t.Fatalf("SUBACK %v, want %v", ack.ReasonCodes, want)
	}
	return r
}

// waitLeased waits until group has n records leased (delivered to its
// member and not settled): the engine has handed them to the session.
func waitLeased(t *testing.T, g *gateway, group string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		info, err := g.eng.Group(context.Background(), group)
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for _, p := range info.Partitions {
			got += p.InFlight
		}
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s has %d records leased, want %d", group, got, n)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// puback acknowledges a QoS 1 delivery.
func (r *rawMQTT) puback(t *testing.T, id uint16) {
	t.Helper()
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: id})
}

// noPublishYet checks, with a PINGREQ as a barrier, that nothing the
// gateway queued before it is a PUBLISH.
func (r *rawMQTT) noPublishYet(t *testing.T) {
	t.Helper()
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	r.expect(t, packets.Pingresp)
}

// TestMQTTGroupWindowFullHeld: an MQTT 5 member with Receive Maximum 2
// whose window is full of plain QoS 1 deliveries it has not acknowledged
// yet gets a group delivery as soon as it acknowledges them: first
// attempt (no DUP), long before the group's ack timeout, and no dead
// letter however often that happens. Before, the group delivery was not
// written ("window_full"), the lease ran out after the ack timeout, and
// after max attempts the record became a dead letter unseen.
func TestMQTTGroupWindowFullHeld(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	r := connectWindow(t, g, "wf-member", 2, "wf/plain", "$share/wf/wf/group")
	pub := g.dial(t)
	for round := range 3 { // more rounds than max attempts
		pub.publish(t, "wf.plain", fmt.Sprint("plain-a", round))
		pub.publish(t, "wf.plain", fmt.Sprint("plain-b", round))
		var ids []uint16
		for range 2 {
			p := r.expect(t, packets.Publish)
			if p.TopicName != "wf/plain" {
				t.Fatalf("round %d: got %s %q, want the plain deliveries first", round, p.TopicName, p.Payload)
			}
			ids = append(ids, p.PacketID)
		}
		want := fmt.Sprintf(`"job-%d"`, round)
		pub.publish(t, "wf.group", fmt.Sprint("job-", round))
		waitLeased(t, g, "wf", 1)
		r.noPublishYet(t) // the Receive Maximum of 2 holds
		for _, id := range ids {
			r.puback(t, id)
		}
		p, err := r.read(t) // waitTimeout, far less than the ack timeout
		if err != nil {
			t.Fatalf("round %d: no group delivery after the window freed: %v", round, err)
		}
		if p.FixedHeader.Type != packets.Publish || p.TopicName != "wf/group" || string(p.Payload) != want {
			t.Fatalf("round %d: got %s %s %q, want the group delivery %s", round,
				packets.PacketNames[p.FixedHeader.Type], p.TopicName, p.Payload, want)
		}
		if p.FixedHeader.Dup || p.FixedHeader.Qos != 1 {
			t.Fatalf("round %d: group delivery dup=%v qos=%d, want a first attempt at QoS 1", round, p.FixedHeader.Dup, p.FixedHeader.Qos)
		}
		r.puback(t, p.PacketID)
		waitLeased(t, g, "wf", 0)
	}
	dls, err := g.eng.DeadLetters(context.Background(), engine.DeadLetterFilter{Group: "wf"})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != 0 {
		t.Fatalf("%d dead letters, want none", len(dls))
	}
}

// TestMQTTGroupWindowFullOrder: group deliveries held while the window is
// full are written in their partition's order as PUBACKs free it, one per
// PUBACK, and those the group delivers after them come after them.
func TestMQTTGroupWindowFullOrder(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	const rm = 3
	r := connectWindow(t, g, "wo-member", rm, "wo/plain", "$share/wo/wo/jobs")
	pub := g.dial(t)
	var plain []uint16
	for i := range rm {
		pub.publish(t, "wo.plain", i)
		plain = append(plain, r.expect(t, packets.Publish).PacketID)
	}
	const n = 6
	for i := range n {
		pub.publish(t, "wo.jobs", fmt.Sprint("job-", i))
	}
	waitLeased(t, g, "wo", rm) // the group's window: rm per partition
	r.noPublishYet(t)
	var got []string
	var owed []uint16
	take := func() {
		t.Helper()
		p := r.expect(t, packets.Publish)
		if p.TopicName != "wo/jobs" || p.FixedHeader.Dup {
			t.Fatalf("got %s %q dup=%v, want a group delivery's first attempt", p.TopicName, p.Payload, p.FixedHeader.Dup)
		}
		got = append(got, string(p.Payload))
		owed = append(owed, p.PacketID)
	}
	for _, id := range plain { // each PUBACK lets one held delivery go
		r.puback(t, id)
		take()
	}
	r.noPublishYet(t) // the window is full of group deliveries now
	for len(got) < n {
		r.puback(t, owed[0])
		owed = owed[1:]
		take()
	}
	for _, id := range owed {
		r.puback(t, id)
	}
	for i, p := range got {
		if want := fmt.Sprintf(`"job-%d"`, i); p != want {
			t.Fatalf("deliveries %v, want job-0 to job-%d in order", got, n-1)
		}
	}
	waitLeased(t, g, "wo", 0)
}

// TestMQTTGroupWindowFullHandedBack: a member whose session ends while it
// holds a group delivery for want of room in its window (its connection
// lost, a DISCONNECT, a takeover by its client id) leaves the group with
// it: another member gets the record at once, not after the group's ack
// timeout.
func TestMQTTGroupWindowFullHandedBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, g *gateway, r *rawMQTT, id string)
	}{
		{"connection lost", func(t *testing.T, _ *gateway, r *rawMQTT, _ string) { r.nc.Close() }},
		{"disconnect", func(t *testing.T, _ *gateway, r *rawMQTT, _ string) {
			r.write(t, []byte{packets.Disconnect << 4, 0})
			r.expectClosed(t)
		}},
		{"takeover", func(t *testing.T, g *gateway, r *rawMQTT, id string) {
			dialRaw(t, g, "tcp", 5).connect(t, id, 60)
			if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
				t.Fatalf("DISCONNECT %#x, want 0x8E (session taken over)", d.ReasonCode)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGateway(t, withMQTT, withLongAckTimeout)
			a := connectWindow(t, g, "wh-a", 1, "wh/plain", "$share/wh/wh/jobs")
			pub := g.dial(t)
			pub.publish(t, "wh.plain", "fills the window")
			if p := a.expect(t, packets.Publish); p.TopicName != "wh/plain" {
				t.Fatalf("got %s", p.TopicName)
			}
			pub.publish(t, "wh.jobs", "held")
			waitLeased(t, g, "wh", 1)
			a.noPublishYet(t)
			b := connectWindow(t, g, "wh-b", 4, "$share/wh/wh/jobs")
			tc.end(t, g, a, "wh-a")
			p := b.expect(t, packets.Publish) // waitTimeout: far less than the ack timeout
			if p.TopicName != "wh/jobs" || string(p.Payload) != `"held"` {
				t.Fatalf("other member got %s %q, want the held record", p.TopicName, p.Payload)
			}
			b.puback(t, p.PacketID)
			waitLeased(t, g, "wh", 0)
		})
	}
}

// TestMQTTGroupWindowFullPubcomp: the window a QoS 2 delivery holds until
// its PUBCOMP (not its PUBREC) lets a held group delivery go once that
// PUBCOMP comes.
func TestMQTTGroupWindowFullPubcomp(t *testing.T) {
	g := newGateway(t, withMQTT, withLongAckTimeout)
	r := connectWindow(t, g, "wq-member", 1, "$share/wq/wq/jobs")
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, PacketID: 2,
		Filters: packets.Subscriptions{{Filter: "wq/plain", Qos: 2}}})
	if ack := r.expect(t, packets.Suback); !bytes.Equal(ack.ReasonCodes, []byte{2}) {
		t.Fatalf("SUBACK %v, want QoS 2", ack.ReasonCodes)
	}
	pub := g.dial(t)
	pub.publish(t, "wq.plain", "exactly once")
	p := r.expect(t, packets.Publish)
	if p.TopicName != "wq/plain" || p.FixedHeader.Qos != 2 {
		t.Fatalf("got %s at QoS %d", p.TopicName, p.FixedHeader.Qos)
	}
	id := []byte{byte(p.PacketID >> 8), byte(p.PacketID)}
	pub.publish(t, "wq.jobs", "held")
	waitLeased(t, g, "wq", 1)
	r.write(t, append([]byte{packets.Pubrec << 4, 2}, id...))
	if rel := r.expect(t, packets.Pubrel); rel.PacketID != p.PacketID {
		t.Fatalf("PUBREL %d, want %d", rel.PacketID, p.PacketID)
	}
	r.noPublishYet(t) // after PUBREC the identifier is still in flight
	r.write(t, append([]byte{packets.Pubcomp << 4, 2}, id...))
	p = r.expect(t, packets.Publish)
	if p.TopicName != "wq/jobs" || string(p.Payload) != `"held"` || p.FixedHeader.Dup {
		t.Fatalf("got %s %q dup=%v, want the held group delivery", p.TopicName, p.Payload, p.FixedHeader.Dup)
	}
	r.puback(t, p.PacketID)
	waitLeased(t, g, "wq", 0)
}
