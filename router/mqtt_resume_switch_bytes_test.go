package router_test

// The switch to live of a persistent session's resume replay, with the
// held bytes bounded: the catch-up goes live with room to spare
// (subscription.drainPending), the held bytes included.

import (
	"strconv"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/router"
)

// TestMQTTResumeSwitchToLiveHeldBytes: a session (queue bound 64, window 1,
// held bytes 16 KiB) resumes with 8 messages of 2 KiB waiting and
// acknowledges nothing at first, so its catch-up waits to go live; 28
// messages published meanwhile are buffered. Once the client acknowledges
// a few, the catch-up goes live with the 28 as its last replayed
// deliveries: the replay's bytes must stay within the held bytes (the
// budget's bound), and the first live message after the switch must not
// be dropped for them; the client gets everything, in order.
func TestMQTTResumeSwitchToLiveHeldBytes(t *testing.T) {
	const heldBytes = 16 << 10
	g := newGateway(t, withResumeBounds(64, 1, heldBytes))
	pad := strings.Repeat("x", 2<<10)
	r, _ := connectPersistentKeepAlive(t, g, "rvs-1", 30)
	if sa := r.subscribeQoS1(t, "rvs/t"); len(sa.ReasonCodes) != 1 || sa.ReasonCodes[0] != 1 {
		t.Fatalf("SUBACK %v", sa.ReasonCodes)
	}
	_ = r.nc.Close()
	waitSaved(t, g, "rvs-1")
	pub, _ := dialSession(t, g, 5, "tcp", "rvs-pub", true, 0)
	var want []string
	for i := range 8 {
		want = append(want, "m"+strconv.Itoa(i))
		pub.publish(t, "rvs/t", 1, "m"+strconv.Itoa(i)+pad)
	}

	r, ack := connectPersistentKeepAlive(t, g, "rvs-1", 30)
	if !ack.SessionPresent {
		t.Fatal("Session Present 0")
	}
	first := r.expect(t, packets.Publish)
	// The whole backlog is queued or held (m1..m7, 14 KiB, past half the
	// held bytes), and the catch-up waits to go live.
	plain := map[string]string{"kind": "plain"}
	waitUntil(t, "the catch-up waits to go live", func() bool {
		return metricValue(t, g.reg, "switchyard_deliveries_total", plain) >= 8 && router.ReplayBudgetWaiting(g.rt)
	})
	for i := range 28 {
		want = append(want, "live"+strconv.Itoa(i))
		pub.publish(t, "rvs/t", 1, "live"+strconv.Itoa(i)+pad)
	}
	waitUntil(t, "the 28 are buffered", func() bool { return router.CatchUpPending(g.rt) == 28 })

	// Acknowledge until the catch-up went live.
	pk := first
	got := 0
	next := func() {
		t.Helper()
		if p := string(pk.Payload); !strings.HasPrefix(p, want[got]) || len(p) != len(want[got])+len(pad) {
			t.Fatalf("delivery %d: got %.12q, want %q", got, p, want[got])
		}
		got++
		r.puback(t, pk.PacketID)
	}
	for router.CatchingUp(g.rt) > 0 {
		next()
		pk = r.expect(t, packets.Publish)
	}
	if n, b := router.ReplayBudgetOut(g.rt); b > heldBytes {
		t.Errorf("live with %d replayed deliveries, %d bytes, queued or held: past the held bytes (%d)", n, b, heldBytes)
	}
	want = append(want, "after")
	pub.publish(t, "rvs/t", 1, "after"+pad)
	window := map[string]string{"why": "window_full"}
	for got < len(want) {
		next()
		if got == len(want) {
			break
		}
		var err error
		if pk, err = r.read(t); err != nil {
			t.Fatalf("waiting for %s: %v (window_full drops %v: the live message after the switch was dropped "+
				"for the replayed deliveries held past the held bytes)", want[got], err,
				metricValue(t, g.reg, "switchyard_mqtt_skipped_total", window))
		}
	}
}
