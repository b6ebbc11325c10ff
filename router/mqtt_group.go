package router

// Shared subscriptions (docs/mqtt.md): "$share/<name>/<filter>" joins the
// consumer group the share name maps to (mqtt.ParseFilter), the group
// native WebSocket and HTTP pull members use, as a member of its own.
// The group delivers to it through the session core like to any member
// (subscription.Deliver, held to the group's window); each delivery is
// encoded per delivery (mqttSession.groupFrame) with a packet identifier
// taken when it is delivered and remembered with the record's position:
// the client's PUBACK (PUBCOMP for QoS 2) acks the record in the group; a
// redelivery carries DUP; a session that ends hands what it has not
// acknowledged back to the group (dropSub leaves), and max attempts and
// dead letters apply as for any member. A QoS 0 shared subscription has no
// acknowledgement: its deliveries are acked once queued, by the session's
// acker goroutine, so at most once.
//
// A shared filter maps to one pattern: a filter ending in "/#" uses its
// descendant pattern only (a group has one pattern), so "$share/g/a/#"
// does not match "a" itself.

import (
	"context"
	"errors"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// groupAck is a shared-subscription delivery awaiting the client's
// acknowledgement.
type groupAck struct {
	sub *subscription
	pos engine.Position
}

// subscribeShared registers and joins a shared filter; it returns the
// SUBACK reason code and the subscription to release once the SUBACK is
// queued.
func (s *mqttSession) subscribeShared(f *packets.Subscription, pf mqtt.Filter, qos byte, subID int) (byte, *subscription) {
	cn := s.cn
	p := pf.Patterns[len(pf.Patterns)-1]
	if pe := validPattern(&s.rt.opts.Bounds, p); pe != nil {
		return rcBadFilter, nil
	}
	if pe := validGroup(pf.Group); pe != nil {
		return rcBadFilter, nil
	}
	viaHook, pe := cn.authorizeSubscribe(p, pf.Group)
	if pe != nil {
		return hookReason(pe), nil
	}
	if old := s.filter(f.Filter); old != nil {
		s.dropFilter(f.Filter)
		s.release(old)
	}
	sub, pe := cn.register(&subscribeSpec{pattern: p, group: pf.Group, policy: session.DropOld,
		maxInFlight: min(s.window, engine.MaxGroupInFlight), hookAllowed: viaHook})
	if pe != nil {
		if pe.Code == codeTooManySubs {
			return rcQuotaExceeded, nil
		}
		return rcUnspecified, nil
	}
	sub.mqttQoS.Store(uint32(qos))
	if subID > 0 {
		sub.mqttSubIDs.Store(subIDProps([]int{subID}))
	}
	// Every shared subscription may need the acker: QoS 0 deliveries, and
	// records MQTT cannot name at any QoS. Started before the join, so
	// that no delivery reads s.acks while it is set.
	s.startAcker()
	pe = cn.joinGroup(sub, fromSpec{}, false)
	if pe != nil && pe.Code == codeGroupConflict && sub.maxInFlight != 0 {
		// The group exists with another max_in_flight (a native member
		// made it): a shared subscription takes the group's.
		sub.maxInFlight = 0
		pe = cn.joinGroup(sub, fromSpec{}, false)
	}
	if pe != nil {
		cn.forget(sub)
		if pe.Code == codeTooManySubs {
			return rcQuotaExceeded, nil
		}
		return rcUnspecified, nil
	}
	s.rt.m.subscriptions.WithLabelValues("group").Inc()
	key := pf.Group + "\x00" + p
	mf := &mqttFilter{qos: qos, patterns: []string{key}, subID: subID}
	mp := &mqttPattern{sub: sub}
	s.addPattern(key, mp)
	mp.add(mf, 1)
	s.addFilter(f.Filter, mf)
	return qos, sub
}

// groupFrame encodes a group delivery to an MQTT member: its PUBLISH with
// a packet identifier of its own (QoS 1 and 2) remembered with the
// record's position, DUP on a redelivery. A record MQTT cannot name is
// acked at once and delivered as nothing.
func (s *mqttSession) groupFrame(sub *subscription, d engine.Delivery) []byte {
	rec := d.Record
	pos := engine.Position{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset}
	topic, err := mqtt.TopicFromNative(rec.Topic)
	qos := byte(sub.mqttQoS.Load())
	var b []byte
	if err == nil {
		pk := packets.Packet{TopicName: topic, Payload: rec.Data, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: qos}}
		if !publishProps(&pk.Properties, rec.Headers, rec.Key, rec.Time, time.Now()) {
			s.rt.mq.m.skipped.WithLabelValues("expired").Inc() // mqtt_props.go
			s.autoAck(groupAck{sub, pos})
			return []byte{}
		}
		if b, err = mqtt.EncodePublishFrame(pk, s.version); err == nil {
			b = withSubIDs(b, sub)
		}
	}
	if err != nil {
		s.rt.mq.m.skipped.WithLabelValues("no_mqtt_name").Inc()
		s.autoAck(groupAck{sub, pos})
		return []byte{}
	}
	if s.maxOut > 0 && len(b) > s.maxOut {
		// Over the client's Maximum Packet Size [MQTT-3.1.2-25]: not
		// written, so it takes no packet identifier (one never acked
		// would shrink the window for good); the lease runs out with the
		// group's ack timeout, and max attempts and dead letters apply.
		s.rt.mq.m.skipped.WithLabelValues("too_large").Inc()
		return []byte{}
	}
	if qos == 0 {
		s.autoAck(groupAck{sub, pos})
		return b
	}
	s.imu.Lock()
	if n := len(s.inflight); n >= s.window {
		// The window (the client's Receive Maximum) is full, with plain
		// deliveries too, or every packet identifier is in flight: not
		// written, so the Receive Maximum holds; the lease runs out with
		// the group's ack timeout and the group delivers it again.
		s.imu.Unlock()
		why := "window_full"
		if n >= maxPacketIDs {
			why = "no_packet_id"
		}
		s.rt.mq.m.skipped.WithLabelValues(why).Inc()
		return []byte{}
	}
	for {
		s.nextID++
		if _, used := s.inflight[s.nextID]; s.nextID != 0 && !used {
			break
		}
	}
	id := s.nextID
	s.addInflight(id)
	if s.groupAcks == nil {
		s.groupAcks = make(map[uint16]groupAck)
	}
	s.groupAcks[id] = groupAck{sub, pos}
	s.imu.Unlock()
	_, idAt, _ := mqtt.Span(b)
	mqtt.PatchPublish(b, idAt, d.Attempt > 1, id)
	return b
}

// ackGroup acks in its group the delivery a PUBACK or PUBCOMP settled,
// if it was one; on the reader goroutine.
func (s *mqttSession) ackGroup(ga groupAck) {
	member := ga.sub.member
	if member == "" {
		return
	}
	err := s.rt.eng.Ack(s.cn.ctx, ga.sub.group, member, ga.pos)
	if err != nil && !errors.Is(err, engine.ErrNotInFlight) && !errors.Is(err, context.Canceled) {
		s.rt.log.Debug("mqtt group ack failed", "group", ga.sub.group, "err", err)
	}
}

// autoAck hands a QoS 0 (or unnameable) group delivery to the acker; past
// its bound the record is left to the group's ack timeout.
func (s *mqttSession) autoAck(ga groupAck) {
	select {
	case s.acks <- ga:
	default:
		s.rt.mq.m.skipped.WithLabelValues("ack_backlog").Inc()
	}
}

// startAcker starts the session's acker goroutine, once: it acks what
// autoAck hands it until the session's context ends (teardown waits for
// it in cn.wg).
func (s *mqttSession) startAcker() {
	if s.acks != nil {
		return
	}
	s.acks = make(chan groupAck, mqttAckBacklog)
	cn := s.cn
	cn.wg.Add(1)
	go func() {
		defer cn.wg.Done()
		for {
			select {
			case ga := <-s.acks:
				ctx, cancel := context.WithTimeout(cn.ctx, 5*time.Second)
				if err := s.rt.eng.Ack(ctx, ga.sub.group, ga.sub.member, ga.pos); err != nil && !errors.Is(err, engine.ErrNotInFlight) {
					s.rt.log.Debug("mqtt group ack failed", "group", ga.sub.group, "err", err)
				}
				cancel()
			case <-cn.ctx.Done():
				return
			}
		}
	}()
}

// mqttAckBacklog bounds the QoS 0 group deliveries awaiting their ack.
const mqttAckBacklog = 1024

// unqueued gives back the packet identifier of a group delivery
// groupFrame encoded and the queue did not take (its subscription ended
// meanwhile, an UNSUBSCRIBE racing the engine's delivery): never written,
// it would never be acked and would shrink the window for good. The group
// has the record back from the member's Leave.
func (s *mqttSession) unqueued(frame []byte) {
	_, idAt, ok := mqtt.Span(frame)
	if !ok || idAt == 0 {
		return // QoS 0, or nothing written
	}
	id := uint16(frame[idAt])<<8 | uint16(frame[idAt+1])
	s.imu.Lock()
	delete(s.inflight, id)
	delete(s.groupAcks, id)
	s.imu.Unlock()
}
