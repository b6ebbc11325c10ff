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
// highest QoS of those filters. A filter subscribed again replaces the
// earlier one in place, as MQTT requires [MQTT-3.8.4-3]: its patterns
// keep their subscriptions (a replay of a resumed session goes on, the
// positions stay) and take the new options (QoS, no local, retain as
// published, subscription identifier, presence), stored for fan-out at
// once (mqttPattern.store); a shared one ($share/) leaves its group and
// joins it again (mqtt_group.go), its unacknowledged messages handed
// back and delivered again. The grants (else the subscribe hook, with its cache:
// cn.authorizeSubscribe) apply to each pattern, but for one case: a
// token granting "a.#" and not "a" gets "a/#" without its parent level
// rather than a refusal.

import (
	"bytes"
	"slices"
	"strings"
	"time"

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
	subID, ok := s.subscriptionID(pk) // mqtt_props.go
	if !ok {
		return false
	}
	s.askPresence = s.wantsPresence(pk) // mqtt_presence.go
	defer func() { s.askPresence = presenceNone }()
	codes := make([]byte, len(pk.Filters))
	var started, joined []*subscription
	var retained []retainedFor
	refused31 := false // MQTT 3.1, whose SUBACK has no failure code
	for i := range pk.Filters {
		f := &pk.Filters[i]
		if s.version == mqtt.Version5 && f.NoLocal && strings.HasPrefix(f.Filter, "$share/") {
			s.end(rcProtocolError, "no local on a shared subscription") // [MQTT-3.8.3-4]
			return false
		}
		existed := s.filter(f.Filter) != nil
		rc := byte(rcQuotaExceeded) // past --mqtt-max-session-bytes
		if s.sessionFits(f.Filter) {
			rc = s.subscribeOne(f, subID, &started, &joined)
		}
		if !strings.HasPrefix(f.Filter, "$share/") && s.wantsRetained(f, rc, existed) {
			if mf := s.filter(f.Filter); mf != nil {
				retained = append(retained, retainedFor{patterns: mf.patterns, qos: mf.qos})
			}
		}
		if rc > 2 {
			s.rt.mq.m.refused.WithLabelValues(reasonName(rc)).Inc()
			switch s.version {
			case mqtt.Version31:
				refused31 = true
			case mqtt.Version311:
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
	if s.claimed {
		// Stored before the SUBACK: a client that has it finds the
		// subscription in its session on any node (mqtt_session.go).
		s.saveSession(time.Time{})
	}
	if refused31 {
		// MQTT 3.1 has no failure code: the connection is closed instead
		// of a SUBACK; the packet's granted filters go with the session
		// (a persistent one keeps them).
		for _, sub := range joined {
			sub.release()
		}
		s.end(rcNotAuthorized, "a filter refused (MQTT 3.1 has no SUBACK failure code)")
		return false
	}
	var items []session.Item
	if len(retained) > 0 {
		items = s.retainedItems(retained) // mqtt_retain.go
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Suback}, ProtocolVersion: s.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	var b bytes.Buffer
	_ = ack.SubackEncode(&b)
	s.cn.sess.Send(session.Item{Frame: b.Bytes()})
	s.sendRetained(items) // right after the SUBACK
	for _, sub := range joined {
		sub.release() // the group's deliveries waited for the SUBACK
	}
	return true
}

// subscribeOne registers one filter and returns its SUBACK reason code:
// the granted QoS, or a failure.
func (s *mqttSession) subscribeOne(f *packets.Subscription, subID int, started, joined *[]*subscription) byte {
	pf, err := mqtt.ParseFilter(f.Filter)
	if err != nil {
		return rcBadFilter
	}
	qos := min(f.Qos, 2)
	if pf.Share != "" {
		rc, sub := s.subscribeShared(f, pf, qos, subID)
		if sub != nil {
			*joined = append(*joined, sub)
		}
		return rc
	}
	cn := s.cn
	// The filter's patterns are pf's own slice (the filter keeps it)
	// unless one is left out below: then a copy without it.
	patterns := pf.Patterns
	var hooked []string // the patterns the subscribe hook allowed
	for _, p := range pf.Patterns {
		if pe := validPattern(&s.rt.opts.Bounds, p); pe != nil {
			return rcBadFilter
		}
		// The grants, else the subscribe hook and its cache (hooks.go),
		// on the reader goroutine and under no lock, as a native
		// subscribe asks it.
		viaHook, pe := cn.authorizeSubscribe(p, "")
		if pe != nil {
			if len(pf.Patterns) == 2 && !strings.HasSuffix(p, "#") {
				// The parent level of "a/#" ("a"), which a grant of
				// "a.#" (or the hook) does not allow: the filter goes on
				// without it.
				patterns = slices.DeleteFunc(slices.Clone(patterns), func(q string) bool { return q == p })
				continue
			}
			return hookReason(pe) // 0x87 but for a hook that failed
		}
		if viaHook {
			hooked = append(hooked, p)
		}
	}
	// Presence (mqtt_presence.go): only a filter of one pattern, a topic.
	asks := s.presenceFor(pf)
	if pe := s.presenceRefused(pf); pe != nil {
		if !s.restoredWithout(f.Filter, pe, rcNotAuthorized) {
			return rcNotAuthorized
		}
		asks = false
	}
	// A filter the session holds already is replaced in place, without
	// interrupting its flow [MQTT-3.8.4-3]: the new filter is counted on
	// its patterns before the old one is taken off them (below), so a
	// pattern both use keeps its subscription, with its replay, its
	// positions and its presence, and takes the new options at once.
	// Until then a refusal leaves the old filter as it was.
	old := s.filter(f.Filter)
	// The patterns the session holds already are shared (a/# and a share
	// "a"); the others are registered, all or none.
	var made []*subscription
	undo := func() {
		for _, m := range made {
			cn.forget(m) // never in the trie, never counted
			s.dropPattern(m.pattern)
		}
	}
	for _, p := range patterns {
		if s.pattern(p) != nil {
			continue
		}
		sub, pe := cn.register(&subscribeSpec{pattern: p, policy: session.DropOld, hookAllowed: slices.Contains(hooked, p)})
		if pe != nil {
			undo()
			return refusalReason(pe)
		}
		made = append(made, sub)
		s.addPattern(p, &mqttPattern{sub: sub, since: time.Now()})
	}
	retry := false
	if asks {
		if pe := s.joinPresence(s.pattern(patterns[0])); pe != nil { // mqtt_presence.go
			if rc := refusalReason(pe); !s.restoredWithout(f.Filter, pe, rc) {
				undo()
				return rc
			}
			asks, retry = false, !presenceRefusal(pe)
		}
	}
	mf := &mqttFilter{qos: qos, patterns: patterns, subID: subID, presence: asks, presenceRetry: retry}
	if s.version == mqtt.Version5 {
		mf.noLocal, mf.rap = f.NoLocal, f.RetainAsPublished
	}
	if mf.noLocal {
		s.noLocal++
	}
	var wasQoS0 []*mqttPattern // held patterns delivering at QoS 0 until now
	for _, p := range patterns {
		mp := s.pattern(p)
		if mp.users[0]+mp.users[1]+mp.users[2] > 0 && mp.qos() == 0 {
			wasQoS0 = append(wasQoS0, mp)
		}
		mp.add(mf, 1)
		if old == nil || !slices.Contains(old.patterns, p) {
			mp.store()
		}
	}
	if old != nil {
		s.release(old) // stores the options of the patterns both use, once
	}
	for _, mp := range wasQoS0 {
		if mp.qos() > 0 {
			// Tracked from now: what it delivered at QoS 0 is not
			// replayed by a later resume (mqtt_session_track.go), so
			// the positions its subscription had from an earlier QoS 1
			// or 2 period go too.
			mp.since = time.Now()
			s.forgetPositions(mp.sub.id)
		}
	}
	s.addFilter(strings.Clone(f.Filter), mf)
	*started = append(*started, made...)
	return qos
}

// refusalReason is the SUBACK reason code of a registration or presence
// join the session core refused.
func refusalReason(pe *protoError) byte {
	if pe.Code == codeTooManySubs || pe.Code == codeRateLimited {
		return rcQuotaExceeded
	}
	return rcUnspecified
}

// mqttPattern is a native pattern an MQTT session subscribes to, shared by
// the filters that map to it: it delivers at the highest of their QoS,
// leaves out the session's own publishes only if every one of them has no
// local, and keeps RETAIN if one of them has retain as published.
type mqttPattern struct {
	sub     *subscription
	users   [3]int32 // the filters using it, by granted QoS
	noLocal int32    // of those, the ones with no local
	rap     int32    // and with retain as published
	// presence counts the filters that asked presence: the session is in
	// the topic's presence set while it is above 0 (mqtt_presence.go).
	// (The counts are int32: a session holds far fewer filters, and the
	// struct fits 64 bytes.)
	presence int32
	// subIDs are the subscription identifiers of its filters, one per
	// filter that has one; nil until the first (MQTT 5's, seldom used:
	// a slice's header in every pattern would take it past 64 bytes).
	subIDs *[]int
	// since is when it began to deliver, for a persistent session's
	// partitions without a position (mqtt_session_track.go).
	since time.Time
}

// add counts filter mf among the pattern's users (n 1) or takes it off
// (n -1).
func (mp *mqttPattern) add(mf *mqttFilter, n int32) {
	mp.users[mf.qos] += n
	if mf.noLocal {
		mp.noLocal += n
	}
	if mf.rap {
		mp.rap += n
	}
	if mf.presence {
		mp.presence += n
	}
	if mf.subID > 0 {
		if n > 0 {
			if mp.subIDs == nil {
				mp.subIDs = new([]int)
			}
			*mp.subIDs = append(*mp.subIDs, mf.subID)
		} else if ids := mp.ids(); len(ids) > 0 {
			if i := slices.Index(ids, mf.subID); i >= 0 {
				*mp.subIDs = slices.Delete(ids, i, i+1)
			}
		}
	}
}

// ids returns the subscription identifiers of its filters (subIDs).
func (mp *mqttPattern) ids() []int {
	if mp.subIDs == nil {
		return nil
	}
	return *mp.subIDs
}

// store publishes the pattern's options and subscription identifiers to
// fan-out.
func (mp *mqttPattern) store() {
	mp.sub.mqttQoS.Store(mp.options())
	mp.sub.mqttSubIDs.Store(subIDProps(mp.ids()))
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
		mp := s.pattern(p)
		if mp == nil {
			continue
		}
		mp.add(mf, -1)
		if mp.users[0]+mp.users[1]+mp.users[2] > 0 {
			mp.store()
			if mf.presence && mp.presence == 0 {
				s.leavePresence(mp) // mqtt_presence.go
			}
			continue
		}
		s.dropPattern(p)
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
		mf := s.filter(pk.Filters[i].Filter)
		if mf == nil {
			codes[i] = rcNoSubscription
			continue
		}
		s.dropFilter(pk.Filters[i].Filter)
		s.release(mf)
	}
	ack := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Unsuback}, ProtocolVersion: s.version,
		PacketID: pk.PacketID, ReasonCodes: codes}
	var b bytes.Buffer
	if s.claimed {
		s.saveSession(time.Time{}) // before the UNSUBACK (mqtt_session.go)
	}
	_ = ack.UnsubackEncode(&b)
	s.cn.sess.Send(session.Item{Frame: b.Bytes()})
	return true
}
