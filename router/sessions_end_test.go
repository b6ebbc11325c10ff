package router_test

import (
	"errors"
	"net/http"
	"testing"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/router"
)

// TestEndSession: DELETE /v1/sessions/{id} needs the admin key, closes
// the session with 4001 and its reason, leaves the others open, and
// answers 404 unknown_session for an id not open here.
func TestEndSession(t *testing.T) {
	g := newGateway(t, withAuth(t))
	tok := hs256(t, claims([]string{"a.#"}, []string{"a.#"}, nil))
	victim := g.dialToken(t, tok)
	other := g.dialToken(t, tok)
	id := victim.welcome["session"].(string)

	if st, body := g.httpAuth(t, http.MethodDelete, "/v1/sessions/"+id, tok, nil); st != http.StatusForbidden {
		t.Fatalf("end with a token: %d %v", st, body)
	}
	if st, body := g.httpAuth(t, http.MethodDelete, "/v1/sessions/"+id, adminKey, nil); st != http.StatusNoContent {
		t.Fatalf("end: %d %v", st, body)
	}
	if got := victim.closeStatus(t); got != router.CloseAdministrator {
		t.Fatalf("close status %d, want %d", got, router.CloseAdministrator)
	}
	victim.closeMu.Lock()
	var ce websocket.CloseError
	if !errors.As(victim.closeErr, &ce) || ce.Reason != router.CloseAdministratorReason {
		t.Errorf("close: %v, want the reason %q", victim.closeErr, router.CloseAdministratorReason)
	}
	victim.closeMu.Unlock()

	other.subscribe(t, "a.b")
	other.publish(t, "a.b", 1)
	other.nextOp(t, "message")

	// Once its teardown is done the session is gone; until then a second
	// call finds it closing and answers 204 again.
	var body map[string]any
	waitUntil(t, "the ended session is unknown", func() bool {
		var st int
		st, body = g.httpAuth(t, http.MethodDelete, "/v1/sessions/"+id, adminKey, nil)
		return st == http.StatusNotFound
	})
	if body["code"] != "unknown_session" {
		t.Fatalf("end of a closed session: %v", body)
	}
}
