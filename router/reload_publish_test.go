package router_test

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router"
)

// TestReloadPublishLimits: a reload applies MaxMessageBytes and
// HTTPPublishRate: an HTTP publish over the new size is message_too_large,
// a second one within the second is rate_limited, a session opened after
// the reload is told the new size and held to it, and one opened before
// keeps the size its welcome announced. A size whose publish frames would
// pass the read limit fixed at start is refused, naming it.
func TestReloadPublishLimits(t *testing.T) {
	g := newGateway(t)
	before := g.dial(t)
	if err := g.rt.Reload(router.Options{MaxMessageBytes: 16, HTTPPublishRate: 1}); err != nil {
		t.Fatal(err)
	}
	big := `"` + strings.Repeat("x", 30) + `"`
	if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "a.b", "data": big}); body["code"] != "message_too_large" {
		t.Fatalf("HTTP publish over the reloaded size: %d %v", code, body)
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "a.b", "data": 1}); code != 200 {
		t.Fatalf("first HTTP publish: %d %v", code, body)
	}
	if code, body, _ := g.httpDo(t, "POST", "/v1/publish", map[string]any{"topic": "a.b", "data": 2}); body["code"] != "rate_limited" {
		t.Fatalf("second HTTP publish within the second at 1/s: %d %v", code, body)
	}
	after := g.dial(t)
	if got := num(after.welcome["limits"].(map[string]any), "max_message_bytes"); got != 16 {
		t.Fatalf("welcome after the reload: max_message_bytes %d, want 16", got)
	}
	if r := after.call(t, map[string]any{"op": "publish", "topic": "a.b", "data": big}); r["code"] != "message_too_large" {
		t.Fatalf("publish over the reloaded size: %v", r)
	}
	if r := before.call(t, map[string]any{"op": "publish", "topic": "a.b", "data": big}); r["op"] != "published" {
		t.Fatalf("publish of a session admitted before: %v", r)
	}
	err := g.rt.Reload(router.Options{MaxMessageBytes: 64 << 20})
	if err == nil || !strings.Contains(err.Error(), "MaxMessageBytes") {
		t.Fatalf("a size past the read limit: %v", err)
	}
}
