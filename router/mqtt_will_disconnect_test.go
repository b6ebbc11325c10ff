package router_test

import (
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestWillAfterErrorDisconnect: an MQTT 5 DISCONNECT whose reason
// is not 0x00 (here 0x80, unspecified error) is not a normal
// disconnection: docs/mqtt.md says only "a DISCONNECT with reason 0x00"
// discards the will, and MQTT 5 publishes it when the client closes
// "without first sending a DISCONNECT packet with a Reason Code 0x00"
// [3.1.2.5]. The gateway discards it for every reason but 0x04.
func TestWillAfterErrorDisconnect(t *testing.T) {
	g := newGateway(t, withMQTT)
	watch, err := dialMQTT(t, g, 5, "tcp", "r5-watch", "")
	if err != nil {
		t.Fatal(err)
	}
	watch.subscribe(t, "r5will/#", 1)
	pub, err := dialMQTT(t, g, 5, "tcp", "r5-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	r := dialRaw(t, g, "tcp", 5)
	if rc := willConnect(t, r, "r5-err", "r5will/err", "after an error", false, 0, 0); rc != 0 {
		t.Fatalf("CONNACK %#x", rc)
	}
	// DISCONNECT, reason 0x80 (unspecified error), no properties.
	r.write(t, []byte{packets.Disconnect << 4, 2, 0x80, 0})
	r.expectClosed(t)
	pub.publish(t, "r5will/marker", 1, "marker")
	var got []string
	deadline := time.After(2 * time.Second)
	for {
		select {
		case m := <-watch.msgs:
			got = append(got, m.payload)
			if m.payload == "after an error" {
				return
			}
			continue
		case <-deadline:
		}
		break
	}
	t.Fatalf("the will was not published after DISCONNECT 0x80 (watcher got %q; wills discarded: %v)", got,
		metricValue(t, g.reg, "switchyard_mqtt_wills_total", map[string]string{"result": "discarded"}))
}
