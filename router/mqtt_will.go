package router

// Will messages of the MQTT transport (docs/mqtt.md, "Will messages").
//
// A CONNECT with a will is checked when it is admitted: its topic as a
// publish's (0x90 invalid, 0x87 outside the publish grants), its payload
// within --max-message-bytes (0x97), RETAIN only where the engine keeps
// retained messages (0x9A), MQTT 5's will properties as a PUBLISH's
// (0x99 for payload format 1 and a payload not UTF-8, 0x82 for a response
// topic with a wildcard); they are carried as a PUBLISH's are, as record
// headers (mqtt_props.go). The session keeps the will (mqttSession.will)
// until it ends: a DISCONNECT with reason 0x00 (or any 3.1.1 DISCONNECT)
// discards it, and so does reason 0x04 not; any other end (the connection
// lost, keep alive, a malformed packet, a takeover, the gateway ending the
// session) publishes it as the client would have, retained when it asks,
// through the same append as a PUBLISH.
//
// MQTT 5's will delay interval holds it back for the lower of that
// interval and the session expiry interval, itself at most
// --mqtt-max-session-expiry (the session ends then, and a session's end
// publishes its will; a persistent session, mqtt_session.go, is removed
// from the store at that expiry too): a new connection with the same
// client id before then discards it [MQTT-3.1.3-9]. Delayed wills are
// held by client id in mqttState.wills, at most MQTTOptions.MaxPendingWills:
// past that bound a will is published at once rather than held, counted.
// Shutdown publishes the delayed wills it finds, as the sessions' ends.
//
// Concurrency: mqttState.mu guards the delayed wills (it is a leaf: the
// timers publish after letting it go); mqttSession.will is an atomic
// pointer, set by admission and cleared by the reader or the end.

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/trie"
)

// DefaultMQTTMaxPendingWills bounds the delayed wills held at once: one
// per client id that went away with a will delay, a small record each.
const DefaultMQTTMaxPendingWills = 10_000

// rcDisconnectWithWill is the DISCONNECT reason that asks for the will
// (error reasons, 0x80 and above, keep it too).
const rcDisconnectWithWill byte = 0x04

// mqttWill is a session's will message.
type mqttWill struct {
	msg    engine.Message
	qos    byte
	retain bool
	delay  time.Duration // the lower of the will delay and the session expiry
	// willDelay is the will delay interval as the CONNECT gave it, for a
	// DISCONNECT that changes the session expiry.
	willDelay time.Duration
}

// pendingWill is a delayed will waiting for its delay or a reconnect.
type pendingWill struct {
	w     *mqttWill
	timer *time.Timer
}

// willMetrics count wills.
type willMetrics struct {
	wills   *prometheus.CounterVec // by result
	pending prometheus.Gauge
}

func newWillMetrics(reg prometheus.Registerer) *willMetrics {
	m := &willMetrics{
		wills: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_wills_total",
			Help: "MQTT will messages, by result: published, discarded (a DISCONNECT with reason 0), cancelled (the client id connected again within the will delay), immediate (published at once, past --mqtt-max-pending-wills), failed (the append or the retained store refused it), forbidden (the session's credential or grants no longer allowed it when it ended)."}, []string{"result"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Name: "switchyard_mqtt_wills_pending",
			Help: "MQTT will messages held for their will delay."}),
	}
	reg.MustRegister(m.wills, m.pending)
	for _, r := range []string{"published", "discarded", "cancelled", "immediate", "failed", "forbidden"} {
		m.wills.WithLabelValues(r)
	}
	return m
}

// admitWill checks a CONNECT's will for the principal who and returns it,
// or the CONNACK reason code of its refusal.
func (rt *Router) admitWill(pk *packets.Packet, who *principal) (*mqttWill, byte) {
	c := &pk.Connect
	if !c.WillFlag {
		return nil, rcSuccess
	}
	native, err := mqtt.TopicToNative(c.WillTopic)
	if err != nil || validTopic(&rt.opts.Bounds, native) != nil {
		return nil, rcBadTopic
	}
	if trie.IsSystem(native) || !who.CanPublish(native) {
		rt.lim.forbidden.WithLabelValues("publish").Inc()
		return nil, rcNotAuthorized
	}
	if max := rt.opts.MaxMessageBytes; max > 0 && len(c.WillPayload) > max {
		return nil, rcQuotaExceeded
	}
	if c.WillRetain && rt.retainer() == nil {
		return nil, rcRetainUnsupported
	}
	w := &mqttWill{msg: engine.Message{Topic: native, Data: append([]byte(nil), c.WillPayload...), Priority: 1},
		qos: min(c.WillQos, 2), retain: c.WillRetain}
	if pk.ProtocolVersion == mqtt.Version5 {
		for _, u := range c.WillProperties.User {
			if u.Key == mqttKeyProperty {
				w.msg.Key = u.Val
				continue
			}
			if u.Key == wire.BinaryHeader || u.Key == mqttRetainHeader || u.Key == mqttOriginHeader {
				continue
			}
			w.msg.Headers = withHeader(w.msg.Headers, u.Key, u.Val)
		}
		// The will's message properties are a PUBLISH's (mqtt_props.go):
		// record headers, given back to MQTT 5 subscribers; its message
		// expiry counts from when it is published (the append).
		wp := &c.WillProperties
		if strings.ContainsAny(wp.ResponseTopic, "+#") {
			return nil, rcProtocolError // a response topic is a topic name [MQTT-3.3.2-14]
		}
		if rc := messageHeaders(wp, w.msg.Data, &w.msg); rc != rcSuccess {
			return nil, rc // payload format 1 and not UTF-8: 0x99 (MQTT 5, 3.1.3.2.3)
		}
		if checkPublishSizes(&rt.opts.Bounds, &w.msg) != nil {
			return nil, rcQuotaExceeded
		}
		w.willDelay = time.Duration(c.WillProperties.WillDelayInterval) * time.Second
		w.delay = min(w.willDelay, time.Duration(pk.Properties.SessionExpiryInterval)*time.Second)
	}
	w.msg.Headers = wire.MarkBinary(w.msg.Headers, w.msg.Data)
	return w, rcSuccess
}

// disconnected handles a client's DISCONNECT for the will: reason 0x00
// (and a 3.1.1 DISCONNECT) discards it, any other (0x04, or an error the
// client reports) keeps it. An MQTT 5 DISCONNECT may change the
// session expiry interval, and so the will's delay, but not from 0
// [MQTT-3.14.2-2]: that is a protocol error, reported as false.
func (s *mqttSession) disconnected(pk *packets.Packet) bool {
	rc := pk.ReasonCode
	if s.version == mqtt.Version5 && pk.Properties.SessionExpiryIntervalFlag {
		if s.expiry == 0 && pk.Properties.SessionExpiryInterval != 0 {
			return false
		}
		s.expiry = pk.Properties.SessionExpiryInterval
		if w := s.will.Load(); w != nil {
			nw := *w // the end reads the will on another goroutine
			nw.delay = min(w.willDelay, s.expiryDuration())
			s.will.CompareAndSwap(w, &nw)
		}
	}
	if s.version == mqtt.Version5 && (rc == rcDisconnectWithWill || rc >= 0x80) {
		return true // the will stands [MQTT-3.1.2-8]
	}
	if s.will.Swap(nil) != nil {
		s.rt.mq.wm.wills.WithLabelValues("discarded").Inc()
	}
	return true
}

// endWill publishes the session's will, or holds it for its delay, once
// the session has ended. A session taken over by a new connection with its
// client id has met that connection within any will delay.
func (s *mqttSession) endWill() {
	w := s.will.Swap(nil)
	if w == nil {
		return
	}
	mq := s.rt.mq
	// The will is the session's publish: not once its credential is no
	// longer accepted (a reload refused it, its token expired), nor to a
	// topic its grants in force no longer cover.
	if s.disc.Load()&0xff == uint32(rcNotAuthorized) || !s.cn.who.CanPublish(w.msg.Topic) {
		mq.wm.wills.WithLabelValues("forbidden").Inc()
		return
	}
	if w.delay > 0 && s.disc.Load()&0xff == uint32(rcTakenOver) {
		mq.wm.wills.WithLabelValues("cancelled").Inc()
		return
	}
	if w.delay <= 0 {
		s.rt.publishWill(w, "published")
		return
	}
	mq.mu.Lock()
	if mq.clients[s.clientID] != nil { // connected again already
		mq.mu.Unlock()
		mq.wm.wills.WithLabelValues("cancelled").Inc()
		return
	}
	if mq.stopped || len(mq.wills) >= mq.opts.MaxPendingWills {
		mq.mu.Unlock()
		s.rt.publishWill(w, "immediate")
		return
	}
	if old := mq.wills[s.clientID]; old != nil {
		old.timer.Stop() // cannot be: the client id connected since
		mq.wm.pending.Dec()
	}
	pw := &pendingWill{w: w}
	id, rt := s.clientID, s.rt // not s: a held will keeps no session alive
	pw.timer = time.AfterFunc(w.delay, func() {
		mq.mu.Lock()
		mine := mq.wills[id] == pw
		if mine {
			delete(mq.wills, id)
			mq.wm.pending.Dec()
		}
		mq.mu.Unlock()
		if mine {
			rt.publishWill(w, "published")
		}
	})
	mq.wills[id] = pw
	mq.wm.pending.Inc()
	mq.mu.Unlock()
}

// cancelWill discards the delayed will of a client id that connected
// again; called with mq.mu held.
func (mq *mqttState) cancelWill(id string) {
	if pw := mq.wills[id]; pw != nil {
		pw.timer.Stop()
		delete(mq.wills, id)
		mq.wm.pending.Dec()
		mq.wm.wills.WithLabelValues("cancelled").Inc()
	}
}

// flushWills publishes every delayed will at once: Shutdown ends their
// sessions.
func (rt *Router) flushWills() {
	mq := rt.mq
	mq.mu.Lock()
	var ws []*mqttWill
	for id, pw := range mq.wills {
		if pw.timer.Stop() {
			ws = append(ws, pw.w)
		}
		delete(mq.wills, id)
		mq.wm.pending.Dec()
	}
	mq.mu.Unlock()
	for _, w := range ws {
		rt.publishWill(w, "published")
	}
}

// publishWill stores a retained will and appends it, counting it under
// result once the engine answered.
func (rt *Router) publishWill(w *mqttWill, result string) {
	m := rt.mq.wm
	ctx, cancel := context.WithTimeout(context.Background(), retainTimeout)
	// A topic policy's mqtt retained: false keeps a retained will from
	// being stored, as a retained PUBLISH (topic_policies_access.go): it
	// is published as any will.
	if w.retain && !rt.retainOff(&w.msg) {
		// A topic the append would refuse (--max-topics) gets no
		// retained message either.
		if err := rt.checkTopicLimit(ctx, w.msg.Topic); err != nil {
			cancel()
			m.wills.WithLabelValues("failed").Inc()
			return
		}
		rm := engine.RetainedMessage{Topic: w.msg.Topic, Key: w.msg.Key, Headers: w.msg.Headers, Data: w.msg.Data, QoS: w.qos, Time: time.Now()}
		lim := engine.RetainLimits{MaxCount: rt.mq.opts.MaxRetained, MaxBytes: rt.mq.opts.MaxRetainedBytes}
		err := rt.retainer().SetRetained(ctx, rm, lim)
		if err != nil {
			cancel()
			m.wills.WithLabelValues("failed").Inc()
			if errors.Is(err, engine.ErrRetainedFull) {
				rt.mq.rm.stores.WithLabelValues("refused").Inc()
			}
			return
		}
		w.msg.Headers = withHeader(w.msg.Headers, mqttRetainHeader, "1")
		rt.mq.rm.stores.WithLabelValues(map[bool]string{true: "cleared", false: "stored"}[len(w.msg.Data) == 0]).Inc()
	}
	rt.appendAsync(ctx, w.msg, "mqtt", func(_ engine.Appended, err error) {
		cancel()
		if err != nil {
			m.wills.WithLabelValues("failed").Inc()
			rt.log.Warn("mqtt will not published", "topic", w.msg.Topic, "err", err)
			return
		}
		m.wills.WithLabelValues(result).Inc()
	})
}
