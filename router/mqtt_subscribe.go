package router

// SUBSCRIBE and UNSUBSCRIBE of an MQTT session (docs/mqtt.md, "Topics").
//
// A filter maps to one or two native patterns (mqtt.ParseFilter: "a/#" is
// "a" and "a.#"), each a plain subscription of the session registered by
// the session core (conn.register: the subscription bound, the grants),
// with the filter's granted QoS on it for fan-out (mqttFrames). Each filter
// gets its own reason code in the SUBACK; the subscriptions go into the
// trie just before it is queued, so that a publish made once the client
// has it reaches them (a delivery may come before the SUBACK, as MQTT
// allows). Filters of a session share the patterns they map to
// (mqttPattern: "t/a" and "t/a/#" both need "t.a"), delivered once at the
// highest QoS of those filters. A filter subscribed again replaces the earlier one (its QoS),
// as MQTT requires. The grants apply to each pattern, but for one case: a
// token granting "a.#" and not "a" gets "a/#" without its parent level
// rather than a refusal.

import (
	"bytes"
	"strings"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// mqttKeyProperty is the user property whose value is a publish's key
// (which picks the partition), both ways.
const mqttKeyProperty = "key"

// subscribe answers a SUBSCRIBE, reporting whether to read on.
func (s *mqttSession) subscribe(pk *packets.Packet) bool {
	if len(pk.Filters) == 0 {
		s.end(rcProtocolError, "SUBSCRIBE without filters") // [MQTT-3.8.3-2]
		return false
	}
	if s.version == mqtt.Version5 && len(pk.Properties.SubscriptionIdentifier) > 0 {
		s.end(rcSubIDUnsupported, "subscription identifiers are not supported")
		return false
	}
	codes := make([]byte, len(pk.Filters))
	var started, joined []*subscription
	var retained []retainedFor
	for i := range pk.Filters {
		f := &pk.Filters[i]
		if s.version == mqtt.Version5 && f.NoLocal && strings.HasPrefix(f.Filter, "$share/") {
			s.end(rcProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
			return false
		}
		_, existed := s.filters[f.Filter]
		rc := s.subscribeOne(f, &started, &joined)
		if !strings.HasPrefix(f.Filter, "$share/") && s.wantsRetained(f, rc, existed) {
			if mf := s.filters[f.Filter]; mf != nil {
				retained = append(retained, retainedFor{patterns: mf.patterns, qos: mf.qos})
			}
		}
		if rc > 2 {
			s.rt.mq.m.refused.WithLabelValues(reasonName(rc)).Inc()
			if s.version != mqtt.Version5 {
				rc = 0x80
			}
		}
		codes[i] = rc
	}
	// Into the trie before the SUBACK, as a native subscribe goes live
	// before its reply: a client that publishes once it has the SUBACK
	// must find the subscription there. A delivery may then come before
	// the SUBACK, which MQTT allows [MQTT-3.8.4].
	for _, sub := range started {
		if !s.cn.holds(sub) {
			continue // replaced by a later filter of the same packet
		}
		sub.isLive.Store(true)
		if err := s.rt.subs.Add(sub.pattern, sub); err != nil {
			s.rt.log.Warn("mqtt subscription not added", "pattern", sub.pattern, "err", err)
			s.cn.forget(sub)
			continue
		}
		s.rt.m.subscriptions.WithLabelValues("plain").Inc()
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: s.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	var b bytes.Buffer
	_ = ack.SubackEncode(&b)
	s.cn.sess.Send(session.Item{Frame: b.Bytes()})
	for _, sub := range joined {
		sub.release() // the group's deliveries waited for the SUBACK
	}
	if len(retained) > 0 {
		s.sendRetained(retained) // after the SUBACK (mqtt_retain.go)
	}
	return true
}

// subscribeOne registers one filter and returns its SUBACK reason code:
// the granted QoS, or a failure.
func (s *mqttSession) subscribeOne(f *packets.Subscription, started, joined *[]*subscription) byte {
	pf, err := mqtt.ParseFilter(f.Filter)
	if err != nil {
		return rcBadFilter
	}
	qos := min(f.Qos, 2)
	if pf.Share != "" {
		rc, sub := s.subscribeShared(f, pf, qos)
		if sub != nil {
			*joined = append(*joined, sub)
		}
		return rc
	}
	cn := s.cn
	patterns := make([]string, 0, len(pf.Patterns))
	for _, p := range pf.Patterns {
		if pe := validPattern(&s.rt.opts.Bounds, p); pe != nil {
			return rcBadFilter
		}
		if _, pe := cn.authorizeSubscribe(p, ""); pe != nil {
			if len(pf.Patterns) == 2 && !strings.HasSuffix(p, "#") {
				// The parent level of "a/#" ("a"), which a grant of
				// "a.#" does not cover: the filter goes on without it.
				continue
			}
			return rcNotAuthorized
		}
		patterns = append(patterns, p)
	}
	if old := s.filters[f.Filter]; old != nil {
		delete(s.filters, f.Filter)
		s.release(old)
	}
	// The patterns the session holds already are shared (a/# and a share
	// "a"); the others are registered, all or none.
	var made []*subscription
	for _, p := range patterns {
		if s.patterns[p] != nil {
			continue
		}
		sub, pe := cn.register(&subscribeSpec{pattern: p, policy: session.DropOld})
		if pe != nil {
			for _, m := range made {
				cn.forget(m) // never in the trie, never counted
				delete(s.patterns, m.pattern)
			}
			if pe.Code == codeTooManySubs {
				return rcQuotaExceeded
			}
			return rcUnspecified
		}
		made = append(made, sub)
		s.patterns[p] = &mqttPattern{sub: sub}
	}
	mf := &mqttFilter{qos: qos, patterns: patterns}
	if s.version == mqtt.Version5 {
		mf.noLocal, mf.rap = f.NoLocal, f.RetainAsPublished
	}
	if mf.noLocal {
		s.noLocal++
	}
	for _, p := range patterns {
		mp := s.patterns[p]
		mp.add(mf, 1)
		mp.sub.mqttQoS.Store(mp.options())
	}
	s.filters[strings.Clone(f.Filter)] = mf
	*started = append(*started, made...)
	return qos
}

// mqttPattern is a native pattern an MQTT session subscribes to, shared by
// the filters that map to it: it delivers at the highest of their QoS,
// leaves out the session's own publishes only if every one of them has no
// local, and keeps RETAIN if one of them has retain as published.
type mqttPattern struct {
	sub     *subscription
	users   [3]int // the filters using it, by granted QoS
	noLocal int    // of those, the ones with no local
	rap     int    // and with retain as published
}

// add counts filter mf among the pattern's users (n 1) or takes it off
// (n -1).
func (mp *mqttPattern) add(mf *mqttFilter, n int) {
	mp.users[mf.qos] += n
	if mf.noLocal {
		mp.noLocal += n
	}
	if mf.rap {
		mp.rap += n
	}
}

// options is the pattern's subscription.mqttQoS: its QoS and the option
// bits (mqtt_retain.go).
func (mp *mqttPattern) options() uint32 {
	o := uint32(mp.qos())
	if mp.noLocal > 0 && mp.noLocal == mp.users[0]+mp.users[1]+mp.users[2] {
		o |= mqttNoLocal
	}
	if mp.rap > 0 {
		o |= mqttRetainPub
	}
	return o
}

func (mp *mqttPattern) qos() byte {
	for q := 2; q > 0; q-- {
		if mp.users[q] > 0 {
			return byte(q)
		}
	}
	return 0
}

// holds reports whether sub is still one of the session's subscriptions.
func (cn *conn) holds(sub *subscription) bool {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.byID[sub.id] == sub
}

// release gives up a filter's patterns, ending those no other filter uses.
func (s *mqttSession) release(mf *mqttFilter) {
	if mf.noLocal {
		s.noLocal--
	}
	for _, p := range mf.patterns {
		mp := s.patterns[p]
		if mp == nil {
			continue
		}
		mp.add(mf, -1)
		if mp.users[0]+mp.users[1]+mp.users[2] > 0 {
			mp.sub.mqttQoS.Store(mp.options())
			continue
		}
		delete(s.patterns, p)
		s.cn.forget(mp.sub)
		s.rt.dropSub(mp.sub)
	}
}

// unsubscribe answers an UNSUBSCRIBE.
func (s *mqttSession) unsubscribe(pk *packets.Packet) bool {
	if len(pk.Filters) == 0 {
		s.end(rcProtocolError, "UNSUBSCRIBE without filters") // [MQTT-3.10.3-2]
		return false
	}
	codes := make([]byte, len(pk.Filters))
	for i := range pk.Filters {
		mf := s.filters[pk.Filters[i].Filter]
		if mf == nil {
			codes[i] = rcNoSubscription
			continue
		}
		delete(s.filters, pk.Filters[i].Filter)
		s.release(mf)
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsuback}, ProtocolVersion: s.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	var b bytes.Buffer
	_ = ack.UnsubackEncode(&b)
	s.cn.sess.Send(session.Item{Frame: b.Bytes()})
	return true
}
