package router_test

import (
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/router"
)

// closedWith waits for c's session to end and checks its close code and
// reason.
func closedWith(t *testing.T, c *client, code websocket.StatusCode, reason string) {
	t.Helper()
	if got := c.closeStatus(t); got != code {
		t.Fatalf("close status %d, want %d", got, code)
	}
	c.closeMu.Lock()
	defer c.closeMu.Unlock()
	var ce websocket.CloseError
	if !errors.As(c.closeErr, &ce) || ce.Reason != reason {
		t.Fatalf("close: %v, want the reason %q", c.closeErr, reason)
	}
}

// stillOpen checks that c's session still delivers: a publish of its own
// comes back on a subscription to topic.
func stillOpen(t *testing.T, c *client, topic string) {
	t.Helper()
	c.subscribe(t, topic)
	c.publish(t, topic, "still open")
	if m := c.nextOp(t, "message"); m["topic"] != topic {
		t.Fatalf("message %v", m)
	}
}

// TestReloadEndsRefusedSessions: a reload that removes the HMAC secret
// or the admin key a session's credential was verified with closes that
// session (WebSocket 1008, the SSE stream's close event with the same
// code and reason), counts it, and leaves the sessions whose credential
// still verifies open.
func TestReloadEndsRefusedSessions(t *testing.T) {
	kept := []byte("a-secret-the-reload-keeps-0123456789abcdef")
	gone := []byte("a-secret-the-reload-removes-0123456789abcd")
	otherAdmin := "another-admin-key-0123456789"
	g := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{kept, gone}, AdminKey: adminKey}
	})
	tok := func(secret []byte) string {
		return sign(t, jwt.SigningMethodHS256, secret, claims([]string{"r.#"}, []string{"r.#"}, nil))
	}
	keptWS := g.dialToken(t, tok(kept))
	goneWS := g.dialToken(t, tok(gone))
	adminWS := g.dialToken(t, adminKey)
	goneSSE, st := openSSE(t, g.srv.URL, "/v1/sse?pattern=r.x&token="+url.QueryEscape(tok(gone)), nil)
	if st != http.StatusOK {
		t.Fatalf("SSE: %d", st)
	}
	goneSSE.nextEvent(t, "welcome")

	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{kept}, AdminKey: otherAdmin}}); err != nil {
		t.Fatal(err)
	}
	closedWith(t, goneWS, websocket.StatusPolicyViolation, router.CloseCredentialRefusedReason)
	closedWith(t, adminWS, websocket.StatusPolicyViolation, router.CloseCredentialRefusedReason)
	for {
		ev := goneSSE.next(t)
		if ev.event != "close" {
			continue
		}
		if num(ev.frame, "code") != int64(websocket.StatusPolicyViolation) || ev.frame["reason"] != router.CloseCredentialRefusedReason {
			t.Fatalf("SSE close event %s", ev.data)
		}
		break
	}
	g.rt.WaitRechecks()
	stillOpen(t, keptWS, "r.kept")
	if n := metricValue(t, g.reg, "switchyard_reload_sessions_ended_total", nil); n != 3 {
		t.Fatalf("reload_sessions_ended_total = %v, want 3", n)
	}
}

// TestReloadEndsSessionOfRemovedJWKSKey: a reload to a key set without
// the key a session's token names closes the session.
func TestReloadEndsSessionOfRemovedJWKSKey(t *testing.T) {
	k1, k2 := testRSA(t), mustEC()
	p1 := newIDP(t, jwkOf("one", &k1.PublicKey), jwkOf("two", &k2.PublicKey))
	p2 := newIDP(t, jwkOf("two", &k2.PublicKey))
	g := newGateway(t, withIDP(p1))
	one := g.dialToken(t, idpToken(t, jwt.SigningMethodRS256, k1, "one"))
	two := g.dialToken(t, idpToken(t, jwt.SigningMethodES256, k2, "two"))
	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{JWKSURL: p2.srv.URL, JWKSMinInterval: 1,
		Audience: "switchyard", Issuer: "https://idp.test/", AdminKey: adminKey}}); err != nil {
		t.Fatal(err)
	}
	closedWith(t, one, websocket.StatusPolicyViolation, router.CloseCredentialRefusedReason)
	g.rt.WaitRechecks()
	stillOpen(t, two, "a.two")
}

// TestReloadNarrowsGrants: a reload that shrinks the anonymous grants
// ends the anonymous session's subscriptions they no longer allow with
// unsubscribed (reason forbidden), as a refresh does, keeps the others
// and the session, and judges its later requests by the new grants; a
// reload that configures the first key ends a session opened without one.
func TestReloadNarrowsGrants(t *testing.T) {
	wide := &router.Grants{Publish: []string{"pub.#", "more.#"}, Subscribe: []string{"pub.#", "more.#"}}
	narrow := &router.Grants{Publish: []string{"pub.#"}, Subscribe: []string{"pub.#"}}
	g := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, Anonymous: wide}
	})
	anon := g.dial(t)
	anon.subscribe(t, "pub.x")
	anon.subscribe(t, "more.x")
	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, Anonymous: narrow}}); err != nil {
		t.Fatal(err)
	}
	if m := anon.nextOp(t, "unsubscribed"); m["pattern"] != "more.x" || m["reason"] != "forbidden" {
		t.Fatalf("unsubscribed %v", m)
	}
	g.rt.WaitRechecks()
	if r := anon.call(t, map[string]any{"op": "subscribe", "pattern": "more.y"}); r["code"] != "forbidden" {
		t.Fatalf("subscribe outside the new grants: %v", r)
	}
	anon.publish(t, "pub.x", 1)
	if m := anon.nextOp(t, "message"); m["topic"] != "pub.x" {
		t.Fatalf("message %v", m)
	}

	open := newGateway(t)
	c := open.dial(t)
	if err := open.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}}}); err != nil {
		t.Fatal(err)
	}
	closedWith(t, c, websocket.StatusPolicyViolation, router.CloseCredentialRefusedReason)
}

// TestReloadEndsMQTTSession: an MQTT session whose password's token a
// reload no longer accepts is ended with a DISCONNECT of reason "not
// authorized" (MQTT 5).
func TestReloadEndsMQTTSession(t *testing.T) {
	gone := []byte("a-secret-the-reload-removes-0123456789abcd")
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret, gone}, AdminKey: adminKey}
	})
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket("recheck-5", 30)
	pk.Connect.PasswordFlag = true
	pk.Connect.Password = []byte(sign(t, jwt.SigningMethodHS256, gone, claims([]string{"m.#"}, []string{"m.#"}, nil)))
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
}

// TestReloadChecksOnlyWhenKeysChange: a reload of limits alone checks no
// session; one that changes the keys checks every open session once.
func TestReloadChecksOnlyWhenKeysChange(t *testing.T) {
	auth := router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}
	g := newGateway(t, func(c *gwConfig) { c.router.Auth = auth })
	tok := hs256(t, claims(nil, []string{"c.#"}, nil))
	for range 3 {
		g.dialToken(t, tok)
	}
	checked := func() float64 { return metricValue(t, g.reg, "switchyard_reload_sessions_checked_total", nil) }
	if err := g.rt.Reload(router.Options{Auth: auth, MaxConnections: 50}); err != nil {
		t.Fatal(err)
	}
	g.rt.WaitRechecks()
	if n := checked(); n != 0 {
		t.Fatalf("sessions checked after a reload of limits: %v, want 0", n)
	}
	more := auth
	more.HMACSecrets = [][]byte{hmacSecret, []byte("a-second-secret-0123456789abcdef-0123")}
	if err := g.rt.Reload(router.Options{Auth: more, MaxConnections: 50}); err != nil {
		t.Fatal(err)
	}
	g.rt.WaitRechecks()
	if n := checked(); n != 3 {
		t.Fatalf("sessions checked after a reload of the keys: %v, want 3", n)
	}
}
