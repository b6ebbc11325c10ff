package router_test

import (
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/router"
)

// TestReloadNarrowsSubscribeInFlight: a subscribe whose grants were
// checked just before a narrowing reload, and which registers after the
// reload's revoke went over the session, is refused (forbidden) instead of
// keeping a subscription the new grants do not allow.
func TestReloadNarrowsSubscribeInFlight(t *testing.T) {
	wide := &router.Grants{Publish: []string{"pub.#", "more.#"}, Subscribe: []string{"pub.#", "more.#"}}
	narrow := &router.Grants{Publish: []string{"pub.#"}, Subscribe: []string{"pub.#"}}
	g := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, Anonymous: wide}
	})
	anon := g.dial(t)
	reached, proceed := make(chan struct{}), make(chan struct{})
	var once sync.Once
	router.SetBeforeRegister(g.rt, func() {
		once.Do(func() {
			close(reached)
			<-proceed
		})
	})
	defer router.SetBeforeRegister(g.rt, nil)
	anon.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "more.y"})
	select {
	case <-reached: // checked against the wide grants, not yet registered
	case <-time.After(waitTimeout):
		t.Fatal("the subscribe did not reach its registration")
	}
	if err := g.rt.Reload(router.Options{Auth: router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, Anonymous: narrow}}); err != nil {
		t.Fatal(err)
	}
	g.rt.WaitRechecks() // the revoke has gone over the session
	close(proceed)
	if r := anon.nextOp(t, "error"); r["id"] != 1.0 || r["code"] != "forbidden" {
		t.Fatalf("the subscribe registered after the narrowing reload: %v, want forbidden", r)
	}
}
