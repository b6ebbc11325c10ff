package engine_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// TestMQTTSubscriptionPresenceJSON: a stored subscription as older
// versions wrote it (no Presence) reads without presence, one without
// presence is written as before, and one with presence keeps it.
func TestMQTTSubscriptionPresenceJSON(t *testing.T) {
	old := `{"Filter":"a/b","QoS":1,"NoLocal":false,"RetainAsPublished":false,"Since":"2026-01-02T03:04:05Z","Next":null,"InFlight":null}`
	var sb engine.MQTTSubscription
	if err := json.Unmarshal([]byte(old), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Presence || sb.Filter != "a/b" || sb.QoS != 1 {
		t.Fatalf("old record read as %+v", sb)
	}
	b, err := json.Marshal(sb)
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != old {
		t.Fatalf("written as %s, want %s", b, old)
	}
	sb.Presence = true
	if b, err = json.Marshal(sb); err != nil || !strings.Contains(string(b), `"Presence":true`) {
		t.Fatalf("with presence: %s, %v", b, err)
	}
	var back engine.MQTTSubscription
	if err := json.Unmarshal(b, &back); err != nil || !back.Presence {
		t.Fatalf("read back %+v, %v", back, err)
	}
}
