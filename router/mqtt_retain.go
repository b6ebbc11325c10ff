package router

// Retained messages of the MQTT transport (docs/mqtt.md, "Retained
// messages") and the subscription options of MQTT 5 that concern them:
// retain handling, retain as published and no local.
//
// The retained messages live in the engine (engine.Retainer: a map on the
// memory engine, a bucket shared by every node on JetStream), apart from
// the log. A PUBLISH with RETAIN stores its message there first (an empty
// payload removes the topic's one), then is appended as any publish, so a
// subscription that goes live and then reads the retained messages finds
// a retained message at least as new as any retained publish it got live.
// The store is bounded in count (MQTTOptions.MaxRetained) and bytes
// (MaxRetainedBytes): a retained PUBLISH past a bound is refused (0x97,
// quota exceeded) and not appended.
//
// A new subscription gets the retained message of every topic its filter
// matches once its SUBACK is queued, each with RETAIN set at the lower of
// the QoS it was published with and the granted one, through the
// session's bounded queue like any delivery (past the bound the oldest is
// dropped, counted). Shared subscriptions get none, as MQTT prescribes.
//
// Records do not carry MQTT's flags, so two headers do: mqttRetainHeader
// marks a record published with RETAIN (for retain as published), and
// mqttOriginHeader names the session that published it, set only while
// that session holds a no-local subscription. MQTT subscribers never see
// them as user properties and MQTT publishers cannot set them; native
// clients see them as headers. A subscription's options ride in the bits
// of subscription.mqttQoS above its QoS, so fan-out reads them with the
// load it makes already.
//
// Concurrency: the retained calls are made on the session's reader
// goroutine; the metrics are safe for concurrent use.

import (
	"context"
	"errors"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// Defaults of the retained store's bounds (MQTTOptions).
const (
	// DefaultMQTTMaxRetained bounds the retained messages: one per topic
	// of ten thousand devices or dashboards' last values.
	DefaultMQTTMaxRetained = 10_000
	// DefaultMQTTMaxRetainedBytes bounds their bytes (topic, key,
	// headers, payload). Every JetStream node keeps a copy in memory, so
	// the bound is a small part of a gateway's memory.
	DefaultMQTTMaxRetainedBytes = 16 << 20
)

// Headers that carry MQTT's flags on a record (see the file comment).
const (
	mqttRetainHeader = "mqtt-retain"
	mqttOriginHeader = "mqtt-origin"
)

// Bits of subscription.mqttQoS above the QoS (bits 0 and 1).
const (
	mqttQoSMask   = 3
	mqttNoLocal   = 1 << 2 // every filter of the pattern has no local
	mqttRetainPub = 1 << 3 // a filter of the pattern has retain as published
)

// retainTimeout bounds one call to the retained store.
const retainTimeout = 5 * time.Second

// retainContext is the context of one call to the retained store: bounded
// by retainTimeout and not by the session's context, whose cancelCtx
// would otherwise keep a children map (and its Done channel) for the rest
// of the session once the first call had made one, about 0.35 KiB of
// every idle subscribed session. A session's end waits for its reader,
// and so for the call, at most retainTimeout.
func (s *mqttSession) retainContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(s.cn.ctx), retainTimeout)
}

// retainMetrics count the retained store's use.
type retainMetrics struct {
	stores *prometheus.CounterVec // retained PUBLISHes, by result
	sent   prometheus.Counter
	count  prometheus.Gauge
	bytes  prometheus.Gauge
}

func newRetainMetrics(reg prometheus.Registerer) *retainMetrics {
	m := &retainMetrics{
		stores: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_retained_total",
			Help: "Retained MQTT PUBLISHes, by result: stored, cleared (an empty payload), refused (past --mqtt-max-retained or --mqtt-max-retained-bytes), failed (the store did not answer), off (the topic's policy turns retained messages off: published, not stored)."}, []string{"result"}),
		sent: prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_mqtt_retained_sent_total",
			Help: "Retained messages queued to new MQTT subscriptions."}),
		count: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_mqtt_retained_messages",
			Help: "Retained messages in the store (every node's, as this node last saw it)."}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_mqtt_retained_bytes",
			Help: "Bytes of the retained messages in the store (every node's, as this node last saw it)."}),
	}
	reg.MustRegister(m.stores, m.sent, m.count, m.bytes)
	for _, r := range []string{"stored", "cleared", "refused", "failed", "off"} {
		m.stores.WithLabelValues(r)
	}
	return m
}

// retainer is the engine's retained store, nil when it has none (the
// CONNACK then says Retain Available 0).
func (rt *Router) retainer() engine.Retainer {
	r, _ := rt.eng.(engine.Retainer)
	return r
}

// retain stores (or, for an empty payload, removes) the retained message
// of a PUBLISH with RETAIN, and returns the reason code of a refusal.
func (s *mqttSession) retain(msg *engine.Message, qos byte) byte {
	rt := s.rt
	r, m := rt.retainer(), rt.mq.rm
	if rt.retainOff(msg) { // a topic policy's mqtt retained: false (topic_policies_access.go)
		return rcSuccess
	}
	rm := engine.RetainedMessage{Topic: msg.Topic, Key: msg.Key, Headers: msg.Headers, Data: msg.Data, QoS: qos, Time: time.Now()}
	lim := engine.RetainLimits{MaxCount: rt.mq.opts.MaxRetained, MaxBytes: rt.mq.opts.MaxRetainedBytes}
	ctx, cancel := s.retainContext()
	defer cancel()
	err := r.SetRetained(ctx, rm, lim)
	switch {
	case errors.Is(err, engine.ErrRetainedFull):
		m.stores.WithLabelValues("refused").Inc()
		s.retainedStats(ctx)
		return rcQuotaExceeded
	case err != nil:
		m.stores.WithLabelValues("failed").Inc()
		rt.log.Warn("mqtt retained message not stored", "topic", msg.Topic, "err", err)
		return rcUnspecified
	case len(msg.Data) == 0:
		m.stores.WithLabelValues("cleared").Inc()
	default:
		m.stores.WithLabelValues("stored").Inc()
	}
	s.retainedStats(ctx)
	return rcSuccess
}

// retainedStats sets the gauges of the retained store.
func (s *mqttSession) retainedStats(ctx context.Context) {
	n, b, err := s.rt.retainer().RetainedStats(ctx)
	if err == nil {
		s.rt.mq.rm.count.Set(float64(n))
		s.rt.mq.rm.bytes.Set(float64(b))
	}
}

// retainedFor is what a SUBSCRIBE's filter gets of the retained messages:
// the native patterns it was granted and its QoS.
type retainedFor struct {
	patterns []string
	qos      byte
}

// wantsRetained reports whether filter f, subscribed with result rc,
// gets the retained messages: granted, not shared, and per its retain
// handling (MQTT 5: 0 always, 1 only if the subscription is new, 2
// never). existed says whether the session had the filter before.
func (s *mqttSession) wantsRetained(f *packets.Subscription, rc byte, existed bool) bool {
	if rc > 2 || s.rt.retainer() == nil {
		return false
	}
	if s.version != mqtt.Version5 {
		return true
	}
	switch f.RetainHandling {
	case 1:
		return !existed
	case 2:
		return false
	}
	return true
}

// retainedItems reads the retained messages of the topics the filters
// match, as the queue items that follow their SUBACK. subscribe reads them
// before it queues the SUBACK and queues them right after it, so that a
// retained message published once the client has the SUBACK is not read
// too, and sent twice (TestMQTTRetainedReadBeforeSuback).
func (s *mqttSession) retainedItems(list []retainedFor) []session.Item {
	r := s.rt.retainer()
	ctx, cancel := s.retainContext()
	defer cancel()
	var items []session.Item
	for _, rf := range list {
		for _, p := range rf.patterns {
			mp := s.pattern(p)
			if mp == nil {
				continue
			}
			err := r.Retained(ctx, p, func(m engine.RetainedMessage) bool {
				b := s.retainedFrame(&m, min(m.QoS, rf.qos))
				if b == nil {
					return true
				}
				b = withSubIDs(b, mp.sub) // mqtt_props.go
				s.retainSeq++
				items = append(items, session.Item{Frame: b, Priority: 1, Policy: session.DropOld,
					Stream: session.Stream{Sub: mp.sub.id, Partition: -1}, Offset: s.retainSeq})
				return true
			})
			if err != nil {
				s.rt.log.Warn("mqtt retained messages not read", "pattern", p, "err", err)
				return items
			}
		}
	}
	return items
}

// sendRetained queues what retainedItems read.
func (s *mqttSession) sendRetained(items []session.Item) {
	for _, it := range items {
		if s.cn.sess.Send(it) {
			s.rt.mq.rm.sent.Inc()
		}
	}
}

// retainedFrame encodes a retained message's PUBLISH for this session,
// with RETAIN set; nil when it has no MQTT form (counted).
func (s *mqttSession) retainedFrame(m *engine.RetainedMessage, qos byte) []byte {
	topic, err := mqtt.TopicFromNative(m.Topic)
	if err != nil {
		s.rt.mq.m.skipped.WithLabelValues("no_mqtt_name").Inc()
		return nil
	}
	pk := packets.Packet{TopicName: topic, Payload: m.Data, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}}
	if !publishProps(&pk.Properties, m.Headers, m.Key, m.Time, time.Now()) {
		return nil // expired (mqtt_props.go)
	}
	b, err := mqtt.EncodePublishFrame(pk, s.version)
	if err != nil {
		s.rt.mq.m.skipped.WithLabelValues("too_large").Inc()
		return nil
	}
	b[0] |= 1 // RETAIN
	return b
}

// userProperties are a record's headers and key as MQTT 5 user
// properties, without the headers that carry MQTT's own flags.
func userProperties(h map[string]string, key string) []packets.UserProperty {
	var out []packets.UserProperty
	for k, v := range wire.UserHeaders(h) {
		if k == mqttRetainHeader || k == mqttOriginHeader || isMQTTPropHeader(k) {
			continue
		}
		out = append(out, packets.UserProperty{Key: k, Val: v})
	}
	if key != "" {
		out = append(out, packets.UserProperty{Key: mqttKeyProperty, Val: key})
	}
	return out
}

// fromSelf reports whether rec was published by the session of sub, a
// no-local subscription.
func fromSelf(rec *engine.Record, sub *subscription) bool {
	o, ok := rec.Headers[mqttOriginHeader]
	return ok && o == sub.c.id
}
