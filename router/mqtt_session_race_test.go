package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// TestMQTTPersistentSessionConnectRace: two CONNECTs of one client id on
// one gateway at once. A claims the stored session, then B (which found
// no connection of that id to take over yet) claims it too and runs; A
// runs last and takes B over. A, the connection left, must hold the
// stored session: a SUBSCRIBE through it is stored, and a reconnect
// resumes with it. Before, the store stayed B's, so A's saves were
// refused as moved and the subscription was not in the resumed session.
func TestMQTTPersistentSessionConnectRace(t *testing.T) {
	g := newGateway(t, withMQTT)
	admittedA, goA := make(chan struct{}), make(chan struct{})
	first := true
	router.SetMQTTBeforeRun(g.rt, func(id string) {
		if id != "pr-1" || !first {
			return
		}
		first = false // admissions of one id are not concurrent here: A waits below before B connects
		close(admittedA)
		<-goA
	})
	t.Cleanup(func() { router.SetMQTTBeforeRun(g.rt, nil) })
	connect := func() *rawMQTT {
		r := dialRaw(t, g, "tcp", 5)
		pk := connectPacket("pr-1", 30)
		pk.Connect.Clean = false
		pk.Properties.SessionExpiryInterval, pk.Properties.SessionExpiryIntervalFlag = 600, true
		r.send(t, pk)
		return r
	}
	a := connect()
	<-admittedA
	b := connect()
	if ack := b.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("B: CONNACK %#x", ack.ReasonCode)
	}
	close(goA)
	if ack := a.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("A: CONNACK %#x", ack.ReasonCode)
	}
	if d := b.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
		t.Fatalf("B: DISCONNECT %#x, want 0x8E session taken over", d.ReasonCode)
	}
	a.subscribeQoS1(t, "pr/a")
	st := g.eng.(engine.MQTTSessionStore)
	rec, ok, err := st.LoadMQTTSession(context.Background(), "pr-1", time.Now())
	if err != nil || !ok {
		t.Fatalf("no stored session (%v, %v)", ok, err)
	}
	found := false
	for _, sb := range rec.Subs {
		found = found || sb.Filter == "pr/a"
	}
	if !found {
		t.Fatalf("the subscription of the connection left (A) is not in the stored session %+v (expires %v): the store is still B's", rec.Subs, rec.ExpiresAt)
	}
}
