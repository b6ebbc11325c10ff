package router_test

// A reload's re-check of open sessions (recheck.go) against the will an
// MQTT session was admitted with (mqtt_will.go): the will is checked
// against the publish grants only at CONNECT, so a session that a reload
// narrows or refuses still has its will published on its end, to a topic
// the credential in force no longer allows.

import (
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/router"
)

// noWill fails if the watcher gets a message on topic within wait: the
// will's append is synchronous on the memory engine, made by the
// session's end right after the connection is seen closed, so a second
// is generous.
func noWill(t *testing.T, watch *client, topic string, wait time.Duration) {
	t.Helper()
	select {
	case m := <-watch.frames:
		if m["op"] == "message" && m["topic"] == topic {
			t.Fatalf("will published on %s after the reload took away the right to publish there: %v", topic, m)
		}
		t.Fatalf("unexpected frame %v", m)
	case <-time.After(wait):
	}
}

// TestWillAfterReloadNarrowsPublish: a reload that takes the will
// topic out of an anonymous MQTT session's publish grants (the session
// keeps running: it has no subscription the new grants refuse) must not
// let its will be published there when the connection is lost; a PUBLISH
// to that topic from the same session is refused.
func TestWillAfterReloadNarrowsPublish(t *testing.T) {
	wide := &router.Grants{Publish: []string{"pub.#", "more.#"}, Subscribe: []string{"pub.#"}}
	narrow := &router.Grants{Publish: []string{"pub.#"}, Subscribe: []string{"pub.#"}}
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, Anonymous: wide}
	})
	watch := g.dialToken(t, hs256(t, claims([]string{"more.#"}, []string{"more.#"}, nil)))
	watch.subscribe(t, "more.#")

	r := dialRaw(t, g, "tcp", 5)
	if rc := willConnect(t, r, "narrowed-will", "more/will", "should not be published", false, 0, 0); rc != 0 {
		t.Fatalf("CONNACK %#x", rc)
	}
	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, Anonymous: narrow}}); err != nil {
		t.Fatal(err)
	}
	g.rt.WaitRechecks()
	// The session is narrowed, not ended: its PUBLISH to the will's
	// topic is refused now.
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}, TopicName: "more/direct", PacketID: 1, Payload: []byte("x")}
	r.send(t, pk)
	if ack := r.expect(t, packets.Puback); ack.ReasonCode != 0x87 {
		t.Fatalf("PUBACK %#x for a publish outside the narrowed grants, want 0x87", ack.ReasonCode)
	}
	r.nc.Close()
	noWill(t, watch, "more.will", 2*time.Second)
}

// TestWillAfterReloadRefusesCredential: a session whose token a
// reload no longer accepts is ended by the gateway (DISCONNECT 0x87); its
// will, checked with the refused credential, must not be published then.
func TestWillAfterReloadRefusesCredential(t *testing.T) {
	gone := []byte("a-secret-the-reload-removes-0123456789abcd")
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret, gone}, AdminKey: adminKey}
	})
	watch := g.dialToken(t, hs256(t, claims([]string{"m.#"}, []string{"m.#"}, nil)))
	watch.subscribe(t, "m.#")

	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("refused-will", 30)
	pk.Connect.PasswordFlag = true
	pk.Connect.Password = []byte(sign(t, jwt.SigningMethodHS256, gone, claims([]string{"m.#"}, []string{"m.#"}, nil)))
	pk.Connect.WillFlag, pk.Connect.WillTopic, pk.Connect.WillPayload = true, "m/will", []byte("revoked")
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}}); err != nil {
		t.Fatal(err)
	}
	if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x87 {
		t.Fatalf("DISCONNECT %#x, want 0x87 (not authorized)", d.ReasonCode)
	}
	r.expectClosed(t)
	noWill(t, watch, "m.will", 2*time.Second)
}
