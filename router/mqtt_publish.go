package router

// PUBLISH from an MQTT client (docs/mqtt.md): an append to the log, as a
// native publish is, through the session's publish pipeline (publish.go),
// whose replies go out in request order, so PUBACKs follow their PUBLISHes
// in order (MQTT 5, 4.6). A QoS 1 PUBLISH is acknowledged (PUBACK) once the
// engine has acknowledged the append, with the MQTT 5 reason code of a
// failure; a QoS 2 PUBLISH likewise with PUBREC, and its packet identifier
// is remembered until PUBREL (answered PUBCOMP), so that a resend before
// then is not appended again;
// MQTT 3.1.1 has no negative PUBACK, so a refused QoS 1 publish of a 3.1.1
// client is acknowledged and dropped, counted, as Mosquitto does with a
// publish its ACL refuses. A publish outside the grants is decided by the
// publish hook when it is on (hookPublish), as a native one is.
//
// The payload is stored as it came: a payload that is JSON is what native
// clients see as "data", any other carries the binary mark
// (internal/wire, binary.go) and reaches them as base64. User properties
// are the record's headers, but for "key", which is its key; the message
// properties (response topic, correlation data, content type, payload
// format, message expiry) are headers of their own (mqtt_props.go).

import (
	"errors"
	"unicode/utf8"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/trie"
)

// publish handles a PUBLISH, reporting whether to read on.
func (s *mqttSession) publish(pk *packets.Packet) bool {
	q := pk.FixedHeader.Qos
	if q == 2 {
		s.imu.Lock()
		_, again := s.rx[pk.PacketID]
		full := !again && len(s.rx) >= s.rt.opts.PublishPipeline
		if !again && !full {
			s.addRx(pk.PacketID)
		}
		s.imu.Unlock()
		switch {
		case again: // a resend before PUBREL: appended once already [MQTT-4.3.3-10]
			s.cn.replyOwed(s.ackPacket(packets.Pubrec, pk.PacketID, rcSuccess))
			return true
		case full:
			s.end(rcReceiveMaxExceeded, "receive maximum exceeded")
			return false
		}
	}
	if s.version == mqtt.Version5 {
		if pk.FixedHeader.Retain && s.rt.retainer() == nil {
			s.end(rcRetainUnsupported, "retained messages are not supported") // the CONNACK said Retain Available 0
			return false
		}
		if (pk.Properties.TopicAliasFlag || pk.Properties.TopicAlias != 0) && !s.resolveAlias(pk) {
			return false // mqtt_alias.go
		}
		if !s.checkProps(pk) {
			return false // mqtt_props.go
		}
	}
	native, err := mqtt.TopicToNative(pk.TopicName)
	if err != nil && !errors.Is(err, mqtt.ErrTooLong) {
		s.end(rcBadTopic, "invalid topic name") // wildcards, empty name, U+0000
		return false
	}
	if err != nil {
		s.forgetRx(pk)
		return s.refusePublish(pk, rcBadTopic)
	}
	msg, rc := s.message(native, pk)
	if rc == rcSuccess && pk.FixedHeader.Retain && s.rt.retainer() != nil {
		// The retained store comes first (a subscriber that gets the
		// record live finds it stored), so the append's own refusals
		// (--max-topics) are asked before it; an append that fails after
		// the store (NATS unreachable) leaves it stored, as docs/mqtt.md
		// says.
		if err := s.rt.checkTopicLimit(s.cn.ctx, native); err != nil {
			rc = appendReason(err)
		} else {
			rc = s.retain(&msg, q) // mqtt_retain.go
		}
	}
	if rc != rcSuccess {
		s.forgetRx(pk)
		return s.refusePublish(pk, rc)
	}
	if pk.FixedHeader.Retain {
		msg.Headers = withHeader(msg.Headers, mqttRetainHeader, "1")
	}
	if s.noLocal > 0 {
		msg.Headers = withHeader(msg.Headers, mqttOriginHeader, s.cn.id)
	}
	s.appendPublish(msg, q, pk.PacketID)
	return true
}

// message checks a PUBLISH against the grants and bounds and returns the
// message to append, or the reason code of its refusal.
func (s *mqttSession) message(native string, pk *packets.Packet) (engine.Message, byte) {
	cn, rt := s.cn, s.rt
	if pe := validTopic(&rt.opts.Bounds, native); pe != nil {
		return engine.Message{}, rcBadTopic
	}
	// Outside the grants, the publish hook decides, as for a native
	// publish, once the message is built (it sees the headers and key).
	hook := false
	if trie.IsSystem(native) {
		rt.lim.forbidden.WithLabelValues("publish").Inc()
		return engine.Message{}, rcNotAuthorized
	}
	if !cn.who.CanPublish(native) {
		if !rt.hooks.enabled(hookPublish) {
			rt.lim.forbidden.WithLabelValues("publish").Inc()
			return engine.Message{}, rcNotAuthorized
		}
		hook = true
	}
	if cn.limiter != nil && !cn.limiter.Allow() {
		rt.m.publishes.WithLabelValues("mqtt", codeRateLimited).Inc()
		return engine.Message{}, rcRateTooHigh
	}
	if max := rt.opts.MaxMessageBytes; max > 0 && len(pk.Payload) > max {
		return engine.Message{}, rcQuotaExceeded
	}
	msg := engine.Message{Topic: native, Data: pk.Payload, Priority: 1}
	if s.version == mqtt.Version5 {
		for _, u := range pk.Properties.User {
			if u.Key == mqttKeyProperty {
				msg.Key = u.Val
				continue
			}
			if u.Key == wire.BinaryHeader || u.Key == mqttRetainHeader || u.Key == mqttOriginHeader || isMQTTPropHeader(u.Key) ||
				!utf8.ValidString(u.Key) || !utf8.ValidString(u.Val) {
				continue
			}
			if msg.Headers == nil {
				msg.Headers = make(map[string]string, len(pk.Properties.User))
			}
			msg.Headers[u.Key] = u.Val
		}
		if rc := propHeaders(pk, &msg); rc != rcSuccess { // mqtt_props.go
			return engine.Message{}, rc
		}
		if pe := checkPublishSizes(&rt.opts.Bounds, &msg); pe != nil {
			return engine.Message{}, rcQuotaExceeded
		}
	}
	msg.Headers = wire.MarkBinary(msg.Headers, msg.Data)
	if hook {
		if rc := s.hookPublish(&msg); rc != rcSuccess {
			return engine.Message{}, rc
		}
	}
	return msg, rcSuccess
}

// hookPublish asks the publish hook about msg, which the session's grants
// do not allow, through the native path's call (Router.hookPublish): on
// the reader goroutine, holding no lock, after the deferred replies are
// flushed, as a native publish asks it. An allowing answer may replace
// the data and headers. It returns the PUBACK reason code of a refusal
// (hookReason).
func (s *mqttSession) hookPublish(msg *engine.Message) byte {
	var key *string
	if msg.Key != "" {
		key = &msg.Key
	}
	s.cn.flushDeferred() // before the round trip (deferral.go)
	if pe := s.rt.hookPublish(s.cn.ctx, s.cn.id, s.cn.who.load(), key, &msg.Data, &msg.Headers, msg.Topic); pe != nil {
		return hookReason(pe)
	}
	return rcSuccess
}

// hookReason is the MQTT 5 reason code (of a SUBACK or PUBACK) of a hook's
// refusal or failure: 0x87 for a refusal, 0x97 for a rate limit or data
// over the limits, 0x80 when the hook could not be asked (fail closed).
func hookReason(pe *protoError) byte {
	switch pe.Code {
	case codeUnavailable:
		return rcUnspecified
	case codeRateLimited, codeTooLarge:
		return rcQuotaExceeded
	}
	return rcNotAuthorized
}

// refusePublish answers a refused PUBLISH: a PUBACK (QoS 1) or PUBREC
// (QoS 2) with the reason (a plain one for 3.1.1), nothing for QoS 0;
// counted.
func (s *mqttSession) refusePublish(pk *packets.Packet, rc byte) bool {
	s.rt.mq.m.refused.WithLabelValues(reasonName(rc)).Inc()
	if pk.FixedHeader.Qos > 0 {
		if s.version != mqtt.Version5 {
			rc = rcSuccess
		}
		s.cn.replyOwed(s.ackPacket(qosAck[pk.FixedHeader.Qos], pk.PacketID, rc))
	}
	return true
}

// qosAck is the packet that acknowledges a PUBLISH of each QoS.
var qosAck = [3]byte{0, packets.Puback, packets.Pubrec}

// forgetRx takes a refused QoS 2 publish off the ones awaiting PUBREL
// when its refusal is not a success (MQTT 5); a 3.1.1 client gets a plain
// PUBREC, and PUBREL then finds it.
func (s *mqttSession) forgetRx(pk *packets.Packet) {
	if pk.FixedHeader.Qos != 2 || s.version != mqtt.Version5 {
		return
	}
	s.imu.Lock()
	delete(s.rx, pk.PacketID)
	s.imu.Unlock()
}

// released answers a PUBREL: the QoS 2 publish is done (PUBCOMP; MQTT 5:
// 0x92 for an identifier it does not know).
func (s *mqttSession) released(id uint16) {
	s.imu.Lock()
	_, ok := s.rx[id]
	delete(s.rx, id)
	s.imu.Unlock()
	rc := rcSuccess
	if !ok && s.version == mqtt.Version5 {
		rc = rcPacketIDNotFound
	}
	s.cn.replyOwed(s.ackPacket(packets.Pubcomp, id, rc))
}

// appendPublish hands the message to the engine through the session's
// publish pipeline; the PUBACK (QoS 1) goes once the append is answered.
func (s *mqttSession) appendPublish(msg engine.Message, qos byte, id uint16) {
	cn, rt := s.cn, s.rt
	pipe := cn.ownPipe() // made by the session's first publish
	slot := pipe.reserve(cn.sess, len(msg.Data), func(bound string) {
		cn.flushDeferred()
		rt.m.pipelineWaits.WithLabelValues(bound).Inc()
	})
	if slot == nil {
		return // the session is closing
	}
	rt.m.publishesInFlight.Inc()
	rt.appendAsync(cn.publishCtx(), msg, "mqtt", func(_ engine.Appended, err error) {
		rt.m.publishesInFlight.Dec()
		var frame []byte
		if qos > 0 {
			rc := rcSuccess
			if err != nil {
				rc = appendReason(err)
				rt.mq.m.refused.WithLabelValues(reasonName(rc)).Inc()
				if s.version != mqtt.Version5 {
					rc = rcSuccess
				} else if qos == 2 {
					s.imu.Lock()
					delete(s.rx, id)
					s.imu.Unlock()
				}
			}
			frame = s.ackPacket(qosAck[qos], id, rc)
		}
		pipe.complete(cn.sess, slot, frame)
	})
}

// appendReason is the PUBACK reason code of a failed append.
func appendReason(err error) byte {
	switch code, _, _ := classify(err); code {
	case codeForbidden:
		return rcNotAuthorized
	case codeTooManyTopics, codeBackpressure, codeRateLimited:
		return rcQuotaExceeded
	case codeShuttingDown:
		return rcServerUnavailable
	}
	return rcUnspecified
}

// ackPacket encodes a PUBACK, PUBREC, PUBREL or PUBCOMP (typ) with reason
// code rc (MQTT 5).
func (s *mqttSession) ackPacket(typ byte, id uint16, rc byte) []byte {
	first := typ << 4
	if typ == packets.Pubrel {
		first |= 2 // [MQTT-3.6.1-1]
	}
	if s.version != mqtt.Version5 || rc == rcSuccess {
		return []byte{first, 2, byte(id >> 8), byte(id)}
	}
	return []byte{first, 3, byte(id >> 8), byte(id), rc}
}

// withHeader returns h with k set to v, h itself when it is not nil.
func withHeader(h map[string]string, k, v string) map[string]string {
	if h == nil {
		h = make(map[string]string, 1)
	}
	h[k] = v
	return h
}
