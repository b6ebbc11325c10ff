package router_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTWillProperties: an MQTT 5 will's content type, payload format
// indicator, message expiry interval, response topic and correlation data
// reach an MQTT 5 subscriber on the published will as a PUBLISH's do,
// and a will whose payload format says UTF-8 over bytes that are not is
// refused (CONNACK 0x99).
func TestMQTTWillProperties(t *testing.T) {
	g := newGateway(t, withMQTT)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	got := make(chan *paho.Publish, 4)
	wnc, err := dialMQTTConn(ctx, g, "tcp")
	if err != nil {
		t.Fatal(err)
	}
	watch := paho.NewClient(paho.ClientConfig{Conn: wnc,
		OnPublishReceived: []func(paho.PublishReceived) (bool, error){func(pr paho.PublishReceived) (bool, error) {
			got <- pr.Packet
			return true, nil
		}}})
	if _, err := watch.Connect(ctx, &paho.Connect{ClientID: "wp-watch", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = watch.Disconnect(&paho.Disconnect{})
		<-watch.Done()
	})
	if _, err := watch.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "wp/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}

	// The will is sent raw: paho.golang (v0.23) packs will properties as
	// a CONNECT's, which leaves these out.
	dies := dialRaw(t, g, "tcp", 5)
	wp := connectPacket("wp-dies", 30)
	wp.Connect.WillFlag, wp.Connect.WillTopic, wp.Connect.WillPayload, wp.Connect.WillQos = true, "wp/will", []byte("gone"), 1
	wp.Mods.AllowResponseInfo = true // the codec's switch for response topic and correlation data
	expiry := uint32(3600)
	p := &wp.Connect.WillProperties
	p.PayloadFormat, p.PayloadFormatFlag, p.MessageExpiryInterval = 1, true, expiry
	p.ContentType, p.ResponseTopic, p.CorrelationData = "text/plain", "wp/reply", []byte{0, 1, 2, 0xff}
	dies.send(t, wp)
	if rc := dies.expect(t, packets.Connack).ReasonCode; rc != 0 {
		t.Fatalf("CONNACK %#x", rc)
	}
	dies.nc.Close() // no DISCONNECT: the will is published
	select {
	case p := <-got:
		pp := p.Properties
		if string(p.Payload) != "gone" || pp == nil {
			t.Fatalf("will %q with properties %+v", p.Payload, pp)
		}
		if pp.ContentType != "text/plain" || pp.ResponseTopic != "wp/reply" || !bytes.Equal(pp.CorrelationData, []byte{0, 1, 2, 0xff}) ||
			pp.PayloadFormat == nil || *pp.PayloadFormat != 1 || pp.MessageExpiry == nil || *pp.MessageExpiry == 0 || *pp.MessageExpiry > expiry {
			t.Fatalf("will properties: content type %q, response topic %q, correlation %x, payload format %v, expiry %v",
				pp.ContentType, pp.ResponseTopic, pp.CorrelationData, pp.PayloadFormat, pp.MessageExpiry)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the will was not published")
	}

	// Payload format 1 over bytes that are not UTF-8: refused.
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("wp-bad", 30)
	pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "wp/bad", []byte{0xff, 0xfe}
	pk.Connect.WillProperties.PayloadFormat, pk.Connect.WillProperties.PayloadFormatFlag = 1, true
	r.send(t, pk)
	if rc := r.expect(t, packets.Connack).ReasonCode; rc != 0x99 {
		t.Fatalf("CONNACK %#x for a will not UTF-8 with payload format 1, want 0x99", rc)
	}
}
