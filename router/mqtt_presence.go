package router

// Presence for MQTT sessions (docs/mqtt.md, "Presence and $sys stats").
//
// A native client asks presence per subscription ("presence": true); an
// MQTT 5 client asks it with the user property presence=true on its
// SUBSCRIBE: each filter of that packet that names one topic (no
// wildcard, not shared) then joins the topic's presence set, as a native
// presence subscription does, with the session's user and the connect
// hook's info, through the same join (Router.presenceJoin: the join rate
// and the per-topic bound apply, on the reader goroutine, under no lock),
// and leaves it with the subscription. Native members see the MQTT
// session join and leave; the join and leave frames an MQTT member would
// get have no MQTT form and are skipped (counted as native_frame).
// The presence belongs to the filters that asked it, not to the native
// pattern they share with other filters ("room" and "room/#" share
// "room"): the pattern's subscription joins when its first such filter
// comes (on a pattern the session held already too) and leaves when its
// last one goes while other filters keep the pattern (mqttPattern.presence).
// A topic policy with presence false refuses such a filter as it refuses
// a native presence subscribe (checkPresence: counted in
// switchyard_forbidden_total{op="presence"}): its SUBACK reason is 0x87
// (not authorized) and the packet's other filters go on.
// MQTT 3.1 and 3.1.1 have no SUBSCRIBE properties: their sessions do not
// join presence.
//
// A persistent session stores which filters asked presence
// (engine.MQTTSubscription.Presence; records of older versions have none)
// and its restored filters join again through the same checks (the topic
// policy, the join rate, the per-topic bound). A refusal there has no
// SUBACK to carry it: the filter is restored without presence, the
// refusal logged and counted as one at SUBSCRIBE is
// (switchyard_forbidden_total{op="presence"} for a policy, and
// switchyard_mqtt_refused_total by reason code), and the record saved
// next keeps the filter without it. An MQTT 3.1.1 connection resuming
// the session does not join either. A takeover needs nothing more: the
// set's members are connections (their session ids), so the old
// connection's leave takes out only its own membership, whichever lands
// first (across nodes both are listed until the old one has ended). At
// the listing bound the old connection, still listed, does not count
// against the restored join (Router.presenceJoinReplacing: the
// connection's id is its owner name, which the stored record names), so
// the session is listed as it was, not hidden.

import (
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/trie"
)

// mqttPresenceProperty is the SUBSCRIBE user property that asks presence.
const mqttPresenceProperty = "presence"

// presenceAsk is who asks presence for the filter being subscribed.
type presenceAsk uint8

const (
	presenceNone     presenceAsk = iota // nobody
	presenceAsked                       // the SUBSCRIBE: a refusal refuses the filter
	presenceRestored                    // the stored session: the filter goes on without
)

// wantsPresence reports whether SUBSCRIBE pk asks presence.
func (s *mqttSession) wantsPresence(pk *packets.Packet) presenceAsk {
	if s.version != mqtt.Version5 || s.rt.pres.eng == nil {
		return presenceNone
	}
	for _, u := range pk.Properties.User {
		if u.Key == mqttPresenceProperty && u.Val == "true" {
			return presenceAsked
		}
	}
	return presenceNone
}

// restoredPresence reports whether stored subscription sb joins presence
// again when restored: it asked presence, and the connection resuming it
// is MQTT 5 (3.1.1 cannot ask presence).
func (s *mqttSession) restoredPresence(sb *engine.MQTTSubscription) presenceAsk {
	if !sb.Presence || s.version != mqtt.Version5 || s.rt.pres.eng == nil {
		return presenceNone
	}
	return presenceRestored
}

// presenceFor reports whether the subscription of filter pf joins
// presence: the SUBSCRIBE (or the stored filter) asks it and pf names one
// topic.
func (s *mqttSession) presenceFor(pf mqtt.Filter) bool {
	return s.askPresence != presenceNone && pf.Share == "" && len(pf.Patterns) == 1 && trie.ValidateTopic(pf.Patterns[0]) == nil
}

// restoredWithout reports whether filter, whose presence pe refused (rc
// its reason code), goes on without presence: so for a restored filter,
// which has no SUBACK to refuse it with; the refusal is logged and
// counted as a SUBACK's would be. At SUBSCRIBE the filter is refused.
// A failure that is no refusal (the presence store failed) is logged and
// counted as a failure of the session store, and the filter keeps asking
// presence in the stored session (mqttFilter.presenceRetry).
func (s *mqttSession) restoredWithout(filter string, pe *protoError, rc byte) bool {
	if s.askPresence != presenceRestored {
		return false
	}
	if !presenceRefusal(pe) {
		s.rt.mq.sm.results.WithLabelValues("failed").Inc()
		s.rt.log.Warn("mqtt stored subscription restored without presence for this connection: the presence join failed; "+
			"the next restore joins again", "client_id", s.clientID, "filter", filter, "code", pe.Code, "err", pe.Msg)
		return true
	}
	s.rt.mq.m.refused.WithLabelValues(reasonName(rc)).Inc()
	s.rt.log.Info("mqtt stored subscription restored without presence", "client_id", s.clientID, "filter", filter,
		"reason", reasonName(rc), "err", pe.Msg)
	return true
}

// presenceRefusal reports whether pe, which kept a filter out of a
// presence set, is a refusal (a topic policy, the join rate, a bound)
// rather than a failure (the presence store's error).
func presenceRefusal(pe *protoError) bool {
	return pe.Limit != "" || pe.Code == codeForbidden || pe.Code == codeRateLimited || pe.Code == codeTooManySubs
}

// joinPresence puts pattern mp's subscription in its topic's presence set
// for a filter that asks it, unless an earlier filter has put it there:
// on the reader goroutine, under no lock. A refusal leaves the pattern as
// it was.
func (s *mqttSession) joinPresence(mp *mqttPattern) *protoError {
	if mp.presence > 0 {
		return nil
	}
	sub := mp.sub
	replaces := "" // a restored session's previous connection (its id: admitMQTT)
	if s.askPresence == presenceRestored && s.resume != nil {
		replaces = s.resume.Owner
	}
	sub.presence.Store(true) // before the join: a dropSub from now leaves
	if pe := s.rt.presenceJoinReplacing(s.cn.ctx, sub, replaces); pe != nil {
		sub.presence.Store(false)
		return pe
	}
	sub.mu.Lock()
	ended := sub.ended
	sub.mu.Unlock()
	if ended {
		// Ended (the session closing, a grant revoked) while it joined:
		// its dropSub may have left before the join landed.
		s.rt.presenceLeave(sub)
	}
	return nil
}

// leavePresence takes pattern mp's subscription out of its topic's
// presence set once no filter using it asks presence; the pattern stays.
func (s *mqttSession) leavePresence(mp *mqttPattern) {
	if mp.sub.presence.CompareAndSwap(true, false) {
		s.rt.presenceLeave(mp.sub)
	}
}

// presenceRefused returns the refusal of filter pf's presence by the
// topic policy of its topic (topic_policies_access.go), counted as a
// native subscribe's; nil when pf does not join presence or may.
func (s *mqttSession) presenceRefused(pf mqtt.Filter) *protoError {
	if !s.presenceFor(pf) {
		return nil
	}
	topic := pf.Patterns[0]
	if p := s.rt.settings().presenceOff(topic); p != "" {
		return s.rt.forbidden("presence", "presence is off on %s (topic policy %s)", quoteInput(topic), quoteInput(p))
	}
	return nil
}
