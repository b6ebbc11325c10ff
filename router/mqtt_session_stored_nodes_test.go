package router_test

import (
	"testing"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTSessionsStoredOnANodeWithoutSessions: on JetStream,
// switchyard_mqtt_sessions_stored counts every node's sessions (its
// help), on a node that has served no MQTT session too: a persistent
// session stored through gateway a is counted by gateway b's gauge
// without waiting for b's first sweep (a minute by default).
func TestMQTTSessionsStoredOnANodeWithoutSessions(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := newJSGateway(t, url, prefix), newJSGateway(t, url, prefix)
	dialSession(t, a, 5, "tcp", "stored-nodes", false, 600)
	waitMetric(t, a, "switchyard_mqtt_sessions_stored", nil, 1)
	waitMetric(t, b, "switchyard_mqtt_sessions_stored", nil, 1)
}
