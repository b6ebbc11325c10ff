package router_test

// Will messages (mqtt_will.go), with raw connections for the ends a paho
// client does not choose, and a paho subscriber watching.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// willConnect connects a raw client of level v with a will on topic,
// the will delay and session expiry given (MQTT 5), and returns the
// CONNACK's reason code.
func willConnect(t *testing.T, r *rawMQTT, id, topic, payload string, retain bool, delay, expiry uint32) byte {
	t.Helper()
	pk := connectPacket(id, 30)
	pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, topic, []byte(payload)
	pk.Connect.WillQos, pk.Connect.WillRetain = 1, retain
	if r.v == 5 {
		pk.Connect.WillProperties.WillDelayInterval = delay
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = expiry, expiry > 0
	}
	r.send(t, pk)
	return r.expect(t, packets.Connack).ReasonCode
}

// TestMQTTWill: a will is published when the connection ends without a
// DISCONNECT (and, for MQTT 5, after DISCONNECT 0x04), not after a
// normal DISCONNECT; a retained will is the topic's retained message; a
// will delay holds it back, a reconnect of the client id within the
// delay discards it, and a session expiry shorter than the delay
// shortens it; bad wills are refused in the CONNACK.
func TestMQTTWill(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.MaxMessageBytes = 1024 })
	watch, err := dialMQTT(t, g, 5, "tcp", "will-watch", "")
	if err != nil {
		t.Fatal(err)
	}
	watch.subscribe(t, "will/#", 1)
	pub, err := dialMQTT(t, g, 5, "tcp", "will-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	// expect reads the wills wanted; with none, it publishes a marker and
	// requires that to come next (a will is published once its session
	// has ended, after the connection closed, so only its absence needs
	// a barrier).
	expect := func(t *testing.T, want ...string) {
		t.Helper()
		if len(want) == 0 {
			pub.publish(t, "will/marker", 1, "m")
			want = []string{"m"}
		}
		for _, w := range want {
			if m := watch.next(t); m.payload != w {
				t.Fatalf("watcher got %s %q, want %q", m.topic, m.payload, w)
			}
		}
	}
	for _, v := range []byte{4, 5} {
		t.Run(fmt.Sprintf("v%d", v), func(t *testing.T) {
			lost := dialRaw(t, g, "tcp", v)
			if rc := willConnect(t, lost, fmt.Sprintf("lost%d", v), "will/lost", fmt.Sprintf("lost %d", v), false, 0, 0); rc != 0 {
				t.Fatalf("CONNACK %#x", rc)
			}
			lost.nc.Close()
			expect(t, fmt.Sprintf("lost %d", v))

			normal := dialRaw(t, g, "ws", v)
			willConnect(t, normal, fmt.Sprintf("normal%d", v), "will/normal", "never", false, 0, 0)
			normal.write(t, []byte{packets.Disconnect << 4, 0})
			normal.expectClosed(t)
			expect(t)

			kept := dialRaw(t, g, "tcp", v)
			willConnect(t, kept, fmt.Sprintf("kept%d", v), fmt.Sprintf("will/kept%d", v), "kept", true, 0, 0)
			kept.nc.Close()
			expect(t, "kept")
			late, err := dialMQTT(t, g, v, "tcp", fmt.Sprintf("late%d", v), "")
			if err != nil {
				t.Fatal(err)
			}
			late.subscribe(t, fmt.Sprintf("will/kept%d", v), 1)
			late.expectMsgs(t, mqttMsg{topic: fmt.Sprintf("will/kept%d", v), payload: "kept", qos: 1, retain: true})
		})
	}
	t.Run("disconnect with will", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		willConnect(t, r, "dww", "will/dww", "asked for", false, 0, 0)
		// Reason 0x04 and an empty property list, as paho sends it (the
		// codec reads no reason from a DISCONNECT of one byte).
		r.write(t, []byte{packets.Disconnect << 4, 2, 0x04, 0})
		r.expectClosed(t)
		expect(t, "asked for")
	})
	t.Run("delay cancelled by a reconnect", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		willConnect(t, r, "delayed", "will/delayed", "too late", false, 60, 60)
		r.nc.Close()
		waitUntil(t, "the will held", func() bool {
			return metricValue(t, g.reg, "switchyard_mqtt_wills_pending", nil) == 1
		})
		again := dialRaw(t, g, "tcp", 5)
		again.connect(t, "delayed", 30)
		if got := metricValue(t, g.reg, "switchyard_mqtt_wills_pending", nil); got != 0 {
			t.Fatalf("switchyard_mqtt_wills_pending = %v after the reconnect, want 0", got)
		}
		expect(t)
	})
	t.Run("delay passes", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		willConnect(t, r, "short", "will/short", "after a second", false, 1, 60)
		r.nc.Close()
		if m := watch.next(t); m.payload != "after a second" {
			t.Fatalf("watcher got %q", m.payload)
		}
	})
	t.Run("session expiry shortens the delay", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		willConnect(t, r, "noexpiry", "will/noexpiry", "at once", false, 3600, 0)
		r.nc.Close()
		expect(t, "at once")
	})
	t.Run("disconnect shortens the delay", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		willConnect(t, r, "shortened", "will/shortened", "expiry 0", false, 3600, 3600)
		// DISCONNECT 0x04 with Session Expiry Interval 0.
		r.write(t, []byte{packets.Disconnect << 4, 7, 0x04, 5, 0x11, 0, 0, 0, 0})
		r.expectClosed(t)
		expect(t, "expiry 0")
	})
	t.Run("disconnect sets an expiry after 0", func(t *testing.T) {
		r := dialRaw(t, g, "tcp", 5)
		willConnect(t, r, "badexpiry", "will/badexpiry", "protocol error", false, 0, 0)
		r.write(t, []byte{packets.Disconnect << 4, 7, 0x00, 5, 0x11, 0, 0, 0, 60})
		if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x82 {
			t.Fatalf("DISCONNECT %#x, want 0x82", d.ReasonCode)
		}
		expect(t, "protocol error")
	})
	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			name, topic, payload string
			want                 byte
		}{
			{"wildcard topic", "will/+", "x", 0x90},
			{"payload too large", "will/big", strings.Repeat("x", 2000), 0x97},
		} {
			r := dialRaw(t, g, "tcp", 5)
			if rc := willConnect(t, r, "refused", c.topic, c.payload, false, 0, 0); rc != c.want {
				t.Errorf("%s: CONNACK %#x, want %#x", c.name, rc, c.want)
			}
		}
	})
	// A will is counted published when its append is answered, which may
	// come after the watcher got it.
	for result, want := range map[string]float64{"published": 9, "discarded": 2, "cancelled": 1} {
		waitMetric(t, g, "switchyard_mqtt_wills_total", map[string]string{"result": result}, want)
	}
}
