package router_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTGroupTooLargeKeepsWindow: a shared-subscription delivery
// over the client's Maximum Packet Size is not written (counted
// too_large), and must not keep a packet identifier of the session's
// in-flight window: with a Receive Maximum of 2 and two such deliveries,
// a plain QoS 1 delivery still reaches the client.
func TestMQTTGroupTooLargeKeepsWindow(t *testing.T) {
	g := newGateway(t, withMQTT)
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("group-too-large", 30)
	pk.Properties.ReceiveMaximum = 2
	pk.Properties.MaximumPacketSize = 256
	r.send(t, pk)
	r.expect(t, packets.Connack)
	if ack := r.subscribeQoS1(t, "$share/big/big/+", "small/t"); !bytes.Equal(ack.ReasonCodes, []byte{1, 1}) {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	native := g.dial(t)
	big := strings.Repeat("x", 1000)
	native.publish(t, "big.a", big)
	native.publish(t, "big.b", big)
	skipped := map[string]string{"why": "too_large"}
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, g.reg, "switchyard_mqtt_skipped_total", skipped) < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the two large group deliveries were not skipped")
		}
		time.Sleep(5 * time.Millisecond)
	}
	native.publish(t, "small.t", "hi")
	p := r.expect(t, packets.Publish)
	if string(p.Payload) != `"hi"` || p.FixedHeader.Qos != 1 {
		t.Fatalf("delivery %q at QoS %d", p.Payload, p.FixedHeader.Qos)
	}
}

// withTooLargePolicy gives the group an ack timeout of 30 s, three times
// waitTimeout: a too-large delivery left to the ack timeout is not
// attempted again within a test's bounded wait.
func withTooLargePolicy(attempts int, backoff time.Duration) func(*gwConfig) {
	return func(c *gwConfig) {
		c.engine.Policy = engine.GroupPolicy{AckTimeout: 30 * time.Second, MaxAttempts: attempts,
			BackoffMin: backoff, BackoffMax: backoff}
	}
}

// connectSmall connects a raw MQTT 5 client whose Maximum Packet Size is
// max (0: none) and subscribes it at QoS 1 to filter.
func connectSmall(t *testing.T, g *gateway, id string, max uint32, filter string) *rawMQTT {
	t.Helper()
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 60)
	pk.Properties.MaximumPacketSize = max
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	if ack := r.subscribeQoS1(t, filter); !bytes.Equal(ack.ReasonCodes, []byte{1}) {
		t.Fatalf("SUBACK %v", ack.ReasonCodes)
	}
	return r
}

// groupDeadLetters lists the dead letters of group.
func groupDeadLetters(t *testing.T, g *gateway, group string) []engine.DeadLetter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	dls, err := g.eng.DeadLetters(ctx, engine.DeadLetterFilter{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	return dls
}

// TestMQTTGroupTooLargeNacked: a shared-subscription delivery over the
// client's Maximum Packet Size counts as an attempt at once, not after
// the group's ack timeout (30 s here): with two attempts allowed and the
// only member too small for the record, it is dead-lettered within the
// test's wait, each attempt counted too_large.
func TestMQTTGroupTooLargeNacked(t *testing.T) {
	groupTooLargeNacked(t, newGateway(t, withMQTT, withTooLargePolicy(2, time.Millisecond)), 2)
}

// TestMQTTGroupTooLargeNackedJetStream is TestMQTTGroupTooLargeNacked on
// JetStream, with its default group policy: an ack timeout of 30 s, five
// attempts, a backoff from 200 ms doubling (3 s in all).
func TestMQTTGroupTooLargeNackedJetStream(t *testing.T) {
	url := natstest.URL(t)
	groupTooLargeNacked(t, newJSGateway(t, url, natstest.Prefix(t, url)), engine.DefaultGroupPolicy.MaxAttempts)
}

func groupTooLargeNacked(t *testing.T, g *gateway, attempts int) {
	connectSmall(t, g, "group-too-large-dl", 256, "$share/tldl/tldl/+")
	pub, err := dialMQTT(t, g, 5, "tcp", "group-too-large-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	pub.publish(t, "tldl/a", 1, strings.Repeat("x", 1000))
	waitUntil(t, "the too-large record to be dead-lettered", func() bool {
		return len(groupDeadLetters(t, g, "tldl")) > 0
	})
	dls := groupDeadLetters(t, g, "tldl")
	if len(dls) != 1 || dls[0].Record.Topic != "tldl.a" || dls[0].Attempts != attempts || !strings.Contains(dls[0].Error, "Maximum Packet Size") {
		t.Fatalf("dead letters %+v, want one after %d attempts", dls, attempts)
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_skipped_total", map[string]string{"why": "too_large"}); n != float64(attempts) {
		t.Fatalf("too_large counted %v times, want %d (one per attempt)", n, attempts)
	}
}

// TestMQTTGroupTooLargeGoesToAnother: a record leased to a member too
// small for it is handed back at once; once a second member joins, the
// group delivers it there, or (the partition staying with the small
// member) dead-letters it after its attempts, well within the group's
// ack timeout (30 s here) either way.
func TestMQTTGroupTooLargeGoesToAnother(t *testing.T) {
	g := newGateway(t, withMQTT, withTooLargePolicy(5, 100*time.Millisecond))
	connectSmall(t, g, "group-too-large-a", 256, "$share/tlmv/tlmv/+")
	g.dial(t).publish(t, "tlmv.a", strings.Repeat("y", 1000))
	skipped := map[string]string{"why": "too_large"}
	waitUntil(t, "the small member to get the record", func() bool {
		return metricValue(t, g.reg, "switchyard_mqtt_skipped_total", skipped) >= 1
	})
	b := connectSmall(t, g, "group-too-large-b", 0, "$share/tlmv/tlmv/+")
	got := make(chan packets.Packet, 1)
	go func() { // ends with b's connection (read deadline, or its close)
		if pk, err := b.read(t); err == nil {
			got <- pk
		}
		close(got)
	}()
	deadline := time.After(waitTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case pk, ok := <-got:
			if !ok || pk.FixedHeader.Type != packets.Publish || len(pk.Payload) < 1000 {
				t.Fatalf("second member got %v (%v)", pk.FixedHeader.Type, ok)
			}
			t.Logf("the second member got the record (attempt after %v too_large)", metricValue(t, g.reg, "switchyard_mqtt_skipped_total", skipped))
			return
		case <-tick.C:
			if dls := groupDeadLetters(t, g, "tlmv"); len(dls) > 0 {
				if dls[0].Attempts != 5 {
					t.Fatalf("dead letter after %d attempts, want 5", dls[0].Attempts)
				}
				t.Logf("the record stayed with the small member and was dead-lettered")
				return
			}
		case <-deadline:
			t.Fatalf("neither the second member nor the dead letters got the record within %v (the ack timeout is 30 s)", waitTimeout)
		}
	}
}
