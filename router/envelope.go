package router

// The lean envelope (internal/wire, encode.go): a subscription encodes its
// catch-up and replay frames in its session's envelope.

import (
	"github.com/switchyard/switchyard/engine"
)

// encode builds the subscription's message frame for rec in its session's
// envelope (the catch-up and replay paths; live fan-out shares frames).
func (s *subscription) encode(rec *engine.Record) []byte {
	if s.c.kind == transportMQTT {
		return s.c.mqtt.replayFrame(rec, s) // a resumed MQTT session (mqtt_session_track.go)
	}
	body, lean := recordBody(nil, rec)
	if s.c.lean {
		return encodeLeanMessage(s.pattern, rec.Topic, body[:lean])
	}
	return encodeMessage(s.pattern, body)
}
