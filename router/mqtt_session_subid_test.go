package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
)

// subIDClient is an MQTT 5 client of a persistent session that records
// each delivery's subscription identifiers.
type subIDClient struct {
	c    *paho.Client
	msgs chan subIDMsg
}

type subIDMsg struct {
	payload string
	id      int // 0: none
}

func dialSubID(t *testing.T, g *gateway, id string, clean bool) (*subIDClient, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := dialMQTTConn(ctx, g, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	sc := &subIDClient{msgs: make(chan subIDMsg, 64)}
	sc.c = paho.NewClient(paho.ClientConfig{Conn: nc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			m := subIDMsg{payload: string(pr.Packet.Payload)}
			if p := pr.Packet.Properties; p != nil && p.SubscriptionIdentifier != nil {
				m.id = *p.SubscriptionIdentifier
			}
			sc.msgs <- m
			return true, nil
		}}})
	expiry := uint32(600)
	ack, err := sc.c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: clean, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}})
	if err != nil {
		nc.Close()
		t.Fatalf("connect %s: %v", id, err)
	}
	t.Cleanup(func() {
		_ = sc.c.Disconnect(&paho.Disconnect{})
		select {
		case <-sc.c.Done():
		case <-time.After(waitTimeout):
			t.Error("paho client did not stop")
		}
	})
	return sc, ack.SessionPresent
}

func (sc *subIDClient) expect(t *testing.T, payload string, id int) {
	t.Helper()
	select {
	case m := <-sc.msgs:
		if m.payload != payload || m.id != id {
			t.Fatalf("delivery %q with subscription identifier %d, want %q with %d", m.payload, m.id, payload, id)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("%q not delivered", payload)
	}
}

// TestMQTTPersistentSessionSubscriptionIdentifiers: the subscription
// identifiers of a persistent session's filters are stored with them, and
// the deliveries after a resume carry them: the replayed QoS 1 ones and
// the live ones of a QoS 0 filter.
func TestMQTTPersistentSessionSubscriptionIdentifiers(t *testing.T) {
	g := newGateway(t, withMQTT)
	pub, _ := dialSession(t, g, 5, "tcp", "sidp-pub", true, 0)
	c, _ := dialSubID(t, g, "sidp", true)
	for _, f := range []struct {
		topic string
		qos   byte
		id    int
	}{{"sidp/a", 1, 42}, {"sidp/b", 0, 268435455}} {
		id := f.id
		if _, err := c.c.Subscribe(context.Background(), &paho.Subscribe{Properties: &paho.SubscribeProperties{SubscriptionIdentifier: &id},
			Subscriptions: []paho.SubscribeOptions{{Topic: f.topic, QoS: f.qos}}}); err != nil {
			t.Fatal(err)
		}
	}
	pub.publish(t, "sidp/a", 1, "before")
	c.expect(t, "before", 42)
	if err := c.c.Disconnect(&paho.Disconnect{}); err != nil {
		t.Fatal(err)
	}
	waitSaved(t, g, "sidp")
	pub.publish(t, "sidp/a", 1, "away")

	c2, present := dialSubID(t, g, "sidp", false)
	if !present {
		t.Fatal("Session Present 0 on the resume")
	}
	c2.expect(t, "away", 42)
	pub.publish(t, "sidp/b", 1, "live-b")
	c2.expect(t, "live-b", 268435455)
	pub.publish(t, "sidp/a", 1, "live-a")
	c2.expect(t, "live-a", 42)
}
