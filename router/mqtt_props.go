package router

// MQTT 5 message properties through the log (docs/mqtt.md, "Properties"):
// a PUBLISH's Response Topic, Correlation Data, Content Type, Payload
// Format Indicator and Message Expiry Interval are record headers with
// the names below, shown to native clients as they are and set by them
// the same way, and given back as properties to MQTT 5 subscribers. A
// record whose Message Expiry Interval has passed since its append is not
// sent to MQTT subscribers of either level (counted as skipped, "expired");
// an MQTT 5 subscriber gets the interval that remains. A PUBLISH with
// Payload Format Indicator 1 whose payload is not UTF-8 is refused with
// 0x99 (Payload format invalid).
//
// Subscription identifiers: a filter subscribed with one keeps it; each
// native pattern of the session (mqttPattern) delivers one PUBLISH per
// record and carries the identifiers of all its filters (the property
// bytes in subscription.mqttSubIDs). The PUBLISH is still encoded once per
// record for every session (mqttFrames); only a subscription with
// identifiers copies it, with its identifiers spliced into its properties
// (mqtt.WithPublishProps), so sessions that use none pay nothing.

import (
	"encoding/base64"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// The record headers of MQTT 5 PUBLISH properties.
const (
	mqttResponseTopicHeader = "mqtt-response-topic"   // the MQTT topic name as written
	mqttCorrelationHeader   = "mqtt-correlation-data" // standard base64 of the bytes
	mqttContentTypeHeader   = "mqtt-content-type"
	mqttPayloadFormatHeader = "mqtt-payload-format" // "1": UTF-8 text
	mqttExpiryHeader        = "mqtt-message-expiry" // seconds from the append, decimal
)

// isMQTTPropHeader reports whether k is the header of a PUBLISH property
// (never a user property, either way).
func isMQTTPropHeader(k string) bool {
	switch k {
	case mqttResponseTopicHeader, mqttCorrelationHeader, mqttContentTypeHeader, mqttPayloadFormatHeader, mqttExpiryHeader:
		return true
	}
	return false
}

// connackProps sets the CONNACK properties of topic aliases and
// subscription identifiers.
func (s *mqttSession) connackProps(p *packets.Properties) {
	p.TopicAliasMaximum = uint16(s.rt.mq.opts.MaxTopicAliases)
	p.SubIDAvailable, p.SubIDAvailableFlag = 1, true
}

// checkProps ends the session for PUBLISH properties MQTT calls a
// protocol error, reporting whether to go on.
func (s *mqttSession) checkProps(pk *packets.Packet) bool {
	if rt := pk.Properties.ResponseTopic; rt != "" && strings.ContainsAny(rt, "+#") {
		s.end(rcProtocolError, "response topic with a wildcard") // [MQTT-3.3.2-14]
		return false
	}
	return true
}

// propHeaders adds pk's message properties to msg's headers, or returns
// the reason code of the PUBLISH's refusal.
func propHeaders(pk *packets.Packet, msg *engine.Message) byte {
	return messageHeaders(&pk.Properties, pk.Payload, msg)
}

// messageHeaders adds the message properties p of a message of payload
// (a PUBLISH's, or a CONNECT's will properties) to msg's headers, or
// returns the reason code of the message's refusal.
func messageHeaders(p *packets.Properties, payload []byte, msg *engine.Message) byte {
	if p.PayloadFormatFlag && p.PayloadFormat == 1 {
		if !utf8.Valid(payload) {
			return rcPayloadFormat // [MQTT-3.3.2-4]
		}
		msg.Headers = withHeader(msg.Headers, mqttPayloadFormatHeader, "1")
	}
	if p.MessageExpiryInterval > 0 {
		msg.Headers = withHeader(msg.Headers, mqttExpiryHeader, strconv.FormatUint(uint64(p.MessageExpiryInterval), 10))
	}
	if p.ContentType != "" {
		msg.Headers = withHeader(msg.Headers, mqttContentTypeHeader, p.ContentType)
	}
	if p.ResponseTopic != "" {
		msg.Headers = withHeader(msg.Headers, mqttResponseTopicHeader, p.ResponseTopic)
	}
	if len(p.CorrelationData) > 0 {
		msg.Headers = withHeader(msg.Headers, mqttCorrelationHeader, base64.StdEncoding.EncodeToString(p.CorrelationData))
	}
	return rcSuccess
}

// expiryLeft is the Message Expiry Interval a record of headers h
// appended at t has left at now: ok false once it has passed, left 0
// when it has none.
func expiryLeft(h map[string]string, t, now time.Time) (left uint32, ok bool) {
	v, has := h[mqttExpiryHeader]
	if !has {
		return 0, true
	}
	n, err := strconv.ParseUint(v, 10, 32)
	if err != nil || n == 0 {
		return 0, true // not a valid interval: none
	}
	waited := uint64(max(now.Sub(t), 0) / time.Second)
	if t.IsZero() {
		waited = 0
	}
	if waited >= n {
		return 0, false
	}
	return uint32(n - waited), true
}

// publishProps sets the PUBLISH properties of a record of headers h and
// key, appended at t, as sent at now; false when its message has expired.
// A property header that is not a valid value (a native client's) is left
// out.
func publishProps(p *packets.Properties, h map[string]string, key string, t, now time.Time) bool {
	left, ok := expiryLeft(h, t, now)
	if !ok {
		return false
	}
	p.MessageExpiryInterval = left
	p.User = userProperties(h, key)
	if h[mqttPayloadFormatHeader] == "1" {
		p.PayloadFormat, p.PayloadFormatFlag = 1, true
	}
	if v := h[mqttContentTypeHeader]; len(v) <= mqtt.MaxMQTTNameBytes {
		p.ContentType = v
	}
	if v := h[mqttResponseTopicHeader]; len(v) <= mqtt.MaxMQTTNameBytes && !strings.ContainsAny(v, "+#\x00") {
		p.ResponseTopic = v
	}
	if v := h[mqttCorrelationHeader]; v != "" {
		if b, err := base64.StdEncoding.DecodeString(v); err == nil && len(b) <= mqtt.MaxMQTTNameBytes {
			p.CorrelationData = b
		}
	}
	return true
}

// mqttRecProps is what mqttFrames keeps of a record's properties: made
// once per record, on first use.
type mqttRecProps struct {
	done    bool
	expired bool
	props   packets.Properties
}

// of returns the record's MQTT 5 properties, nil when it has expired.
func (rp *mqttRecProps) of(rec *engine.Record) *packets.Properties {
	if !rp.done {
		rp.done = true
		rp.expired = !publishProps(&rp.props, rec.Headers, rec.Key, rec.Time, time.Now())
	}
	if rp.expired {
		return nil
	}
	return &rp.props
}

// frame returns the packet for a subscription of an MQTT session (the
// record's shared one, with the subscription's identifiers when it has
// any), nil when the record has no MQTT form or has expired (counted).
func (f *mqttFrames) frame(rec *engine.Record, s *subscription) []byte {
	if f.props.of(rec) == nil {
		s.c.rt.mq.m.skipped.WithLabelValues("expired").Inc()
		return nil
	}
	b := f.sharedFrame(rec, s)
	if b == nil {
		return nil
	}
	return withSubIDs(b, s)
}

// withSubIDs returns packet b with the subscription identifiers of sub,
// b itself when it has none.
func withSubIDs(b []byte, sub *subscription) []byte {
	ids := sub.mqttSubIDs.Load()
	if ids == nil {
		return b
	}
	out, err := mqtt.WithPublishProps(b, *ids)
	if err != nil {
		return b
	}
	return out
}

// subIDProps encodes the Subscription Identifier properties of ids
// (nonzero ones), nil when there are none.
func subIDProps(ids []int) *[]byte {
	var b []byte
	for _, id := range ids {
		if id > 0 {
			b = mqtt.AppendSubscriptionID(b, id)
		}
	}
	if b == nil {
		return nil
	}
	return &b
}

// subscriptionID returns the Subscription Identifier of a SUBSCRIBE (0
// for none), reporting whether to read on: MQTT 5 allows one, from 1 on
// [MQTT-3.8.2.1.2].
func (s *mqttSession) subscriptionID(pk *packets.Packet) (int, bool) {
	ids := pk.Properties.SubscriptionIdentifier
	if s.version != mqtt.Version5 || len(ids) == 0 {
		return 0, true
	}
	if len(ids) > 1 || ids[0] <= 0 {
		s.end(rcProtocolError, "subscription identifier 0 or more than one")
		return 0, false
	}
	return ids[0], true
}

// mqttMaxSubID is the largest subscription identifier, a variable byte
// integer's largest value.
const mqttMaxSubID = 268_435_455
