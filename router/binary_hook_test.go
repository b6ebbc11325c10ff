package router_test

import (
	"net/http"
	"testing"
)

// TestHookPublishBytes: the publish hook gets bytes as base64 with
// "encoding" (not raw bytes inside its JSON body, which could not be
// sent), without the reserved header; its headers keep the record bytes.
func TestHookPublishBytes(t *testing.T) {
	b := newBackend(t, func(w http.ResponseWriter, r *http.Request, hook string, body map[string]any) {
		if hook == "publish" {
			reply(w, map[string]any{"allow": true, "headers": map[string]string{"app": "yes"}})
			return
		}
		reply(w, map[string]any{"allow": true})
	})
	g := newGateway(t, withHooks(b))
	sub := g.dial(t)
	sub.subscribe(t, "hb.t")
	pub := g.dial(t)
	pub.publish(t, "hb.t", "AAEC/w==", "encoding", "base64", "headers", map[string]string{"k": "v"})
	body := b.last("publish")
	if body["data"] != "AAEC/w==" || body["encoding"] != "base64" || len(body["headers"].(map[string]any)) != 1 {
		t.Errorf("hook body = %v", body)
	}
	m := sub.nextOp(t, "message")
	h, _ := m["headers"].(map[string]any)
	if m["data"] != "AAEC/w==" || m["encoding"] != "base64" || len(h) != 1 || h["app"] != "yes" {
		t.Errorf("message = %v", m)
	}
}
