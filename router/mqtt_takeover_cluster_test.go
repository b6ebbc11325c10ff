package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt311 "github.com/eclipse/paho.mqtt.golang"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// takenClient is an MQTT 5 client that acknowledges nothing and reports
// the server's DISCONNECT.
type takenClient struct {
	c    *paho.Client
	msgs chan string
	disc chan byte
}

func dialTaken(t *testing.T, g *gateway, id string, clean bool, expiry uint32) *takenClient {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := dialMQTTConn(ctx, g, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	tc := &takenClient{msgs: make(chan string, 64), disc: make(chan byte, 1)}
	tc.c = paho.NewClient(paho.ClientConfig{Conn: nc, EnableManualAcknowledgment: true,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			tc.msgs <- string(pr.Packet.Payload)
			return true, nil
		}},
		OnServerDisconnect: func(d *paho.Disconnect) { tc.disc <- d.ReasonCode }})
	if _, err := tc.c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
		nc.Close()
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() {
		_ = tc.c.Disconnect(&paho.Disconnect{})
		select {
		case <-tc.c.Done():
		case <-time.After(waitTimeout):
			t.Error("paho client did not stop")
		}
	})
	return tc
}

// expectTakenOver waits for the server's DISCONNECT 0x8E.
func (tc *takenClient) expectTakenOver(t *testing.T) {
	t.Helper()
	select {
	case rc := <-tc.disc:
		if rc != 0x8E {
			t.Fatalf("DISCONNECT %#x, want 0x8E (session taken over)", rc)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the connection through the other gateway was not ended")
	}
	select {
	case <-tc.c.Done():
	case <-time.After(waitTimeout):
		t.Fatal("the connection taken over was not closed")
	}
}

// TestMQTTTakeoverAcrossGateways: a CONNECT through gateway B with a
// client id connected through gateway A (one JetStream) ends A's
// connection (MQTT 5: DISCONNECT 0x8E; 3.1.1: a close), for persistent
// and clean sessions, counted on A as a remote takeover; the persistent
// session's deliveries A never had acknowledged reach B's connection.
func TestMQTTTakeoverAcrossGateways(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := newJSGateway(t, url, prefix), newJSGateway(t, url, prefix)
	pub, _ := dialSession(t, b, 5, "tcp", "tko-pub", true, 0)
	remote := func() float64 {
		return metricValue(t, a.reg, "switchyard_mqtt_takeovers_total", map[string]string{"where": "remote"})
	}

	// Persistent: two QoS 1 deliveries in flight, never acknowledged.
	old := dialTaken(t, a, "tko-p", true, 600)
	if _, err := old.c.Subscribe(context.Background(), &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "tko/p", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	pub.publish(t, "tko/p", 1, "m1")
	pub.publish(t, "tko/p", 1, "m2")
	for _, want := range []string{"m1", "m2"} {
		select {
		case got := <-old.msgs:
			if got != want {
				t.Fatalf("got %q, want %q", got, want)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("%s not delivered through A", want)
		}
	}
	nw, present := dialSession(t, b, 5, "tcp", "tko-p", false, 600)
	if !present {
		t.Fatal("Session Present 0 through B")
	}
	old.expectTakenOver(t)
	nw.expectFresh(t, map[string]bool{}, "m1", "m2")
	pub.publish(t, "tko/p", 1, "m3")
	nw.expectFresh(t, map[string]bool{"m1": true, "m2": true}, "m3")
	if n := remote(); n != 1 {
		t.Fatalf("A counted %v remote takeovers, want 1", n)
	}

	// Clean, MQTT 5: B's clean connection ends A's.
	oldClean := dialTaken(t, a, "tko-c5", true, 0)
	dialSession(t, b, 5, "tcp", "tko-c5", true, 0)
	oldClean.expectTakenOver(t)

	// Clean, 3.1.1: A's connection is closed.
	lost := make(chan struct{}, 1)
	opts := mqtt311.NewClientOptions().AddBroker("tcp://" + a.rt.MQTTAddr().String()).SetClientID("tko-c4").
		SetProtocolVersion(4).SetCleanSession(true).SetAutoReconnect(false).SetKeepAlive(30 * time.Second).
		SetConnectTimeout(waitTimeout).SetConnectionLostHandler(func(mqtt311.Client, error) { lost <- struct{}{} })
	c4 := mqtt311.NewClient(opts)
	if err := wait311(c4.Connect()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c4.Disconnect(50) })
	dialSession(t, b, 4, "tcp", "tko-c4", true, 0)
	select {
	case <-lost:
	case <-time.After(waitTimeout):
		t.Fatal("the 3.1.1 connection through A was not closed")
	}
	if n := remote(); n != 3 {
		t.Fatalf("A counted %v remote takeovers, want 3", n)
	}
}
