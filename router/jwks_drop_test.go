package router_test

import (
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/router"
)

// TestJWKSRefreshDropEndsSessions: a periodic JWKS refresh that no longer
// holds a key re-checks the open sessions as a reload does: the session
// whose token that key signed is closed (1008, credential no longer
// accepted), the other stays open.
func TestJWKSRefreshDropEndsSessions(t *testing.T) {
	k1, k2 := testRSA(t), mustEC()
	p := newIDP(t, jwkOf("one", &k1.PublicKey), jwkOf("two", &k2.PublicKey))
	g := newGateway(t, withIDP(p, func(a *router.AuthOptions) { a.JWKSRefresh = 20 * time.Millisecond }))
	one := g.dialToken(t, idpToken(t, jwt.SigningMethodRS256, k1, "one"))
	two := g.dialToken(t, idpToken(t, jwt.SigningMethodES256, k2, "two"))
	p.setKeys(jwkOf("two", &k2.PublicKey))
	closedWith(t, one, websocket.StatusPolicyViolation, router.CloseCredentialRefusedReason)
	g.rt.WaitRechecks()
	stillOpen(t, two, "a.two")
}
