package router_test

import (
	"fmt"
	"testing"
	"time"
)

// TestMQTTSharedJoinsANativeGroup: a "$share" subscription joins a group a
// native member made with the default max_in_flight and takes the group's
// setting; it was refused with SUBACK 0x80 (group conflict), while an MQTT
// member joining first worked.
func TestMQTTSharedJoinsANativeGroup(t *testing.T) {
	g := newGateway(t, withMQTT)
	native := g.dial(t)
	native.subscribe(t, "jobs2.*", "group", "mixed")
	var members []*mqttClient
	for _, v := range []byte{4, 5} {
		c, err := dialMQTT(t, g, v, "tcp", fmt.Sprintf("mixed-%d", v), "")
		if err != nil {
			t.Fatal(err)
		}
		if got := c.subscribe(t, "$share/mixed/jobs2/+", 1); got != 1 {
			t.Fatalf("MQTT %d: SUBACK %#x, want 1", v, got)
		}
		members = append(members, c)
	}
	pub := g.dial(t)
	const n = 12
	for i := range n {
		pub.publish(t, fmt.Sprintf("jobs2.k%d", i%4), i)
	}
	seen := map[string]int{}
	deadline := time.After(waitTimeout)
	for len(seen) < n {
		select {
		case m := <-members[0].msgs:
			seen[m.payload]++
		case m := <-members[1].msgs:
			seen[m.payload]++
		case m := <-native.frames:
			if m["op"] != "message" {
				continue
			}
			seen[fmt.Sprint(m["data"])]++
			native.send(t, map[string]any{"op": "ack", "group": "mixed", "topic": m["topic"], "partition": m["partition"], "offset": m["offset"]})
		case <-deadline:
			t.Fatalf("the group delivered %d of %d records", len(seen), n)
		}
	}
	for k, c := range seen {
		if c != 1 {
			t.Errorf("record %s delivered %d times", k, c)
		}
	}
}
