package router

// MQTT persistent sessions (docs/mqtt.md, "Persistent sessions"): a
// session that is not clean (3.1.1 clean session 0; MQTT 5 a session
// expiry interval above 0) outlives its connection for its expiry, stored
// in the engine (engine.MQTTSessionStore) so that a reconnect through any
// node resumes it. What is stored are the subscriptions and, for the
// messages not delivered yet, positions in the log (mqtt_session_track.go):
// never copies of messages.
//
// The life of a stored session:
//   - CONNECT (admission, openSession): a clean start removes the stored
//     session; otherwise it is loaded (Session Present 1 when found). A
//     session to keep is then claimed, with the connection's own owner
//     name: the claim stores it under that owner, so a connection it
//     took over, on any node, can no longer write it back (its save fails
//     with engine.ErrMQTTSessionMoved). A session held by a connection of
//     this node is ended first, and its last save waited for (bounded),
//     so the claim starts from its latest positions. Two CONNECTs of one
//     id at once may both claim; the one that runs last takes the other
//     over and claims again (reclaimSession), so the connection left
//     holds the stored session.
//     On a store of several nodes a connection that ends with its session
//     claims a hold of its id instead, and a claim made through another
//     node ends this node's connection of the id (mqtt_takeover.go).
//   - After the CONNACK (restoreSession): the stored subscriptions are
//     made again; a QoS 1 or 2 one replays the log from its positions
//     (the session core's catch-up), the deliveries in flight again with
//     DUP, then goes live; a QoS 0 one goes live; a shared one joins its
//     group again, which kept its unacknowledged messages.
//   - SUBSCRIBE and UNSUBSCRIBE save the session (a node lost while it is
//     connected leaves the subscriptions it had).
//   - The end saves the session with its expiry time, or removes it when
//     it is not to be kept (MQTT 5 DISCONNECT with expiry 0).
//   - A sweeper (one goroutine of the Router, stopped by Shutdown) removes
//     the expired sessions every MQTTOptions.SessionSweep, and a load
//     finds an expired session absent.
//
// Bounds: MQTTOptions.MaxSessions stored sessions (a claim past it is
// refused: CONNACK 0x97, 3.1.1 return code 3), MQTTOptions.MaxSessionBytes
// per session (a SUBSCRIBE that would pass it gets 0x97 for the filter;
// positions that would pass it are left out of the save, their partitions
// then resume from the subscription's start time: duplicates, no loss),
// MQTTOptions.MaxSessionExpiry bounds every expiry (3.1.1's sessions last
// "until cleaned": this long).
//
// Concurrency: no lock is held across an engine call. The stored-session
// fields of mqttSession are the reader goroutine's, but for the positions
// (mqttTrack, under mqttSession.imu with the in-flight window) and done.

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// Defaults of the persistent-session options.
const (
	DefaultMQTTMaxSessions      = 100_000
	DefaultMQTTMaxSessionBytes  = 64 << 10
	DefaultMQTTMaxSessionExpiry = 7 * 24 * time.Hour
	DefaultMQTTSessionSweep     = time.Minute
)

// sessionTimeout bounds one engine call of the session store.
const sessionTimeout = 5 * time.Second

// sessionMetrics count persistent sessions.
type sessionMetrics struct {
	swept   atomic.Int64 // the sessions the last sweep left, for a store that cannot count now
	gaps    prometheus.Counter
	results *prometheus.CounterVec
}

// sessionCounter is the capability of a session store (memengine,
// jsengine) to say how many sessions it holds now, holds left out, from
// memory: switchyard_mqtt_sessions_stored reads it at each scrape, so the
// gauge follows every store and removal (on JetStream every node's, as
// this node's view of the store has them). ok false: not now (the store
// not opened on this node yet); the last sweep's count is shown then.
type sessionCounter interface {
	MQTTSessionCount() (n int, ok bool)
}

// newSessionMetrics registers the persistent-session metrics; eng is
// the engine, whose sessions the gauge counts when it is a
// sessionCounter.
func newSessionMetrics(reg prometheus.Registerer, eng engine.Engine) *sessionMetrics {
	m := &sessionMetrics{}
	counter, _ := eng.(sessionCounter)
	stored := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "switchyard_mqtt_sessions_stored",
		Help: "MQTT persistent sessions in the store (every node's, on JetStream), as they are stored and removed."},
		func() float64 {
			if counter != nil {
				if n, ok := counter.MQTTSessionCount(); ok {
					return float64(n)
				}
			}
			return float64(m.swept.Load())
		})
	m.gaps = prometheus.NewCounter(prometheus.CounterOpts{Name: "switchyard_mqtt_session_gaps_total",
		Help: "Messages a resumed MQTT persistent session did not get because retention trimmed them before they were delivered (MQTT has no gap packet)."})
	m.results = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "switchyard_mqtt_sessions_total",
		Help: "MQTT persistent-session events, by result: resumed, created, discarded (a clean start removed one), expired (the sweeper or a load removed one), saved, moved (a save after another connection claimed the session), refused_full (past --mqtt-max-sessions), failed (the store failed, or a restored filter's presence join did)."}, []string{"result"})
	reg.MustRegister(stored, m.gaps, m.results)
	for _, r := range []string{"resumed", "created", "discarded", "expired", "saved", "moved", "refused_full", "failed"} {
		m.results.WithLabelValues(r)
	}
	return m
}

// mqttStore returns the engine's session store, nil when it has none.
func (rt *Router) mqttStore() engine.MQTTSessionStore {
	st, _ := rt.eng.(engine.MQTTSessionStore)
	return st
}

// sessionLimits are the store's bounds.
func (mq *mqttState) sessionLimits() engine.MQTTSessionLimits {
	return engine.MQTTSessionLimits{MaxCount: mq.opts.MaxSessions, MaxBytes: mq.opts.MaxSessionBytes}
}

// openSession is admission's step for the stored session: it removes it
// (clean start) or loads it, and claims it when the new session is to be
// kept. It returns the CONNACK reason code of a refusal. will is the
// session's will, whose delay the expiry bounds.
func (rt *Router) openSession(s *mqttSession, pk *packets.Packet, will *mqttWill) byte {
	mq := rt.mq
	st := rt.mqttStore()
	clean := pk.Connect.Clean
	s.owner = newID()
	s.setSentAliases(pk) // mqtt_alias.go; per connection, not stored
	if s.version == mqtt.Version311 {
		s.persist = !clean
		if s.persist {
			s.expiry = uint32(mq.opts.MaxSessionExpiry / time.Second)
		}
	} else {
		s.persist = s.expiry > 0
		if max := uint32(mq.opts.MaxSessionExpiry / time.Second); s.expiry > max {
			s.expiry, s.expiryCapped = max, true
			if will != nil {
				will.delay = min(will.willDelay, mq.opts.MaxSessionExpiry)
			}
		}
	}
	if st == nil {
		s.persist = false
		return rcSuccess
	}
	if !clean {
		rt.takeOverLocal(s.clientID)
	}
	// On a store shared by several nodes every connection holds its
	// client id in the store, a session that ends with its connection by
	// a hold (mqtt_takeover.go): its claim replaces a stored session as a
	// removal would, and ends a connection of another node holding the id.
	hold := rt.mqttWatcher() != nil
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	if clean {
		had, err := rt.discardSession(ctx, st, s.clientID, !hold)
		if err != nil {
			return rcServerUnavailable
		}
		if had {
			mq.sm.results.WithLabelValues("discarded").Inc()
		}
	} else {
		rec, ok, err := st.LoadMQTTSession(ctx, s.clientID, time.Now())
		if err != nil {
			mq.sm.results.WithLabelValues("failed").Inc()
			rt.log.Warn("mqtt session not loaded", "client_id", s.clientID, "err", err)
			return rcServerUnavailable
		}
		if ok && !rec.IsHold() {
			s.resume, s.present = &rec, true
		}
	}
	if !s.persist && hold {
		return rt.claimHold(ctx, s)
	}
	if !s.persist {
		if s.present {
			// Resumed by a session that ends with its connection: the
			// stored one is taken out now.
			if err := st.DeleteMQTTSession(ctx, s.clientID, ""); err != nil {
				return rcServerUnavailable
			}
		}
		return rcSuccess
	}
	rec := engine.MQTTSession{ClientID: s.clientID, Owner: s.owner, Node: rt.sessionNode(), Claim: true,
		Expiry: s.expiryDuration(), Epoch: rt.eng.Epoch()}
	if s.resume != nil {
		rec.Subs, rec.Epoch, rec.Released = s.resume.Subs, s.resume.Epoch, s.resume.Released
	}
	err := st.SaveMQTTSession(ctx, rec, mq.sessionLimits())
	if errors.Is(err, engine.ErrMQTTSessionTooLarge) && s.resume != nil {
		err = rt.claimSmaller(ctx, s, rec)
	}
	switch {
	case errors.Is(err, engine.ErrMQTTSessionsFull):
		mq.sm.results.WithLabelValues("refused_full").Inc()
		return rcQuotaExceeded
	case err != nil:
		mq.sm.results.WithLabelValues("failed").Inc()
		rt.log.Warn("mqtt session not claimed", "client_id", s.clientID, "err", err)
		return rcServerUnavailable
	}
	s.claimed, s.watched, s.keepFor = true, hold, s.expiryDuration()
	if s.present {
		mq.sm.results.WithLabelValues("resumed").Inc()
	} else {
		mq.sm.results.WithLabelValues("created").Inc()
	}
	return rcSuccess
}

// claimSmaller claims a stored session over MaxSessionBytes (stored under
// a larger bound): without its positions and released identifiers (its
// subscriptions resume from their start time: duplicates), or, if its
// filters alone pass the bound, as a new session (Session Present 0).
func (rt *Router) claimSmaller(ctx context.Context, s *mqttSession, rec engine.MQTTSession) error {
	subs := make([]engine.MQTTSubscription, len(rec.Subs))
	for i, sb := range rec.Subs {
		sb.Next, sb.InFlight = nil, nil
		subs[i] = sb
	}
	rec.Subs, rec.Released = subs, nil
	s.resume.Subs, s.resume.Released = subs, nil
	if rec.Size() > rt.mq.opts.MaxSessionBytes {
		rec.Subs = nil
		s.resume, s.present = nil, false
	}
	rt.log.Info("mqtt stored session over --mqtt-max-session-bytes: resumed smaller", "client_id", s.clientID,
		"subscriptions_kept", len(rec.Subs))
	return rt.mqttStore().SaveMQTTSession(ctx, rec, rt.mq.sessionLimits())
}

// sessionNode is this node's name in stored sessions (engine.MQTTSession.
// Node): the engine's NodeID, "" on an engine of one node.
func (rt *Router) sessionNode() string {
	if n, ok := rt.eng.(engine.Nodes); ok {
		return n.NodeID()
	}
	return ""
}

// discardSession removes a client id's stored session for a clean start
// (or, remove false, leaves that to the hold the caller claims next),
// reporting whether there was one.
func (rt *Router) discardSession(ctx context.Context, st engine.MQTTSessionStore, id string, remove bool) (bool, error) {
	rec, had, err := st.LoadMQTTSession(ctx, id, time.Now())
	if err != nil || !had {
		return false, err
	}
	if !remove {
		return !rec.IsHold(), nil
	}
	return !rec.IsHold(), st.DeleteMQTTSession(ctx, id, "")
}

// takeOverLocal ends the session of this node holding client id, if any,
// before a new connection with that id reads the store, and waits
// (bounded) for that session's last save. (A clean start needs no wait:
// the session it removes can no longer be saved, and the claim in run
// ends the earlier connection.)
func (rt *Router) takeOverLocal(id string) {
	mq := rt.mq
	mq.mu.Lock()
	old := mq.clients[id]
	mq.mu.Unlock()
	if old == nil {
		return
	}
	mq.m.takeovers.WithLabelValues("local").Inc()
	old.end(rcTakenOver, "session taken over")
	t := time.NewTimer(sessionTimeout)
	defer t.Stop()
	select {
	case <-old.ended():
	case <-t.C:
		rt.log.Warn("mqtt session taken over before its last save", "client_id", id)
	}
}

// closedDone is the done of every session that ended before anything
// waited for it.
var closedDone = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// ended returns a channel closed once the session's end has saved it.
// The channel is made here, by the first to wait: few sessions are ever
// waited for (a takeover), and an idle one need not hold a channel.
func (s *mqttSession) ended() <-chan struct{} {
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.done == nil {
		s.done = make(chan struct{})
	}
	return s.done
}

// markEnded closes the channel of ended, or has ended return a closed one.
func (s *mqttSession) markEnded() {
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.done == nil {
		s.done = closedDone
		return
	}
	close(s.done)
}

// saveSession stores the session's subscriptions and positions; expires
// is zero while the connection holds it. The caller is the reader
// goroutine, or the end once the reader and writer are done.
func (s *mqttSession) saveSession(expires time.Time) {
	s.putSession(s.sessionRecord(expires))
}

// reclaimSession claims the stored session again for s, which took over
// a connection of this node holding the same client id (mqttState.claim):
// that connection may have claimed the store after s did (two CONNECTs at
// once), and the connection left must hold it. Reader goroutine, before
// the first packet is read.
func (s *mqttSession) reclaimSession() {
	if s.holding {
		s.reclaimHold() // mqtt_takeover.go
		return
	}
	rec := s.sessionRecord(time.Time{})
	rec.Claim = true
	s.putSession(rec)
}

// putSession stores rec, the session's record.
func (s *mqttSession) putSession(rec engine.MQTTSession) {
	st := s.rt.mqttStore()
	mq := s.rt.mq
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	err := st.SaveMQTTSession(ctx, rec, mq.sessionLimits())
	if errors.Is(err, engine.ErrMQTTSessionMoved) && s.watched && !rec.Claim {
		// Removed by a sweep rather than claimed, before this node put it
		// back (mqtt_takeover.go): put back with this save.
		rec.Restore = true
		err = st.SaveMQTTSession(ctx, rec, mq.sessionLimits())
	}
	switch {
	case err == nil:
		mq.sm.results.WithLabelValues("saved").Inc()
	case errors.Is(err, engine.ErrMQTTSessionMoved):
		s.claimed = false // another connection has it now
		mq.sm.results.WithLabelValues("moved").Inc()
	default:
		mq.sm.results.WithLabelValues("failed").Inc()
		s.rt.log.Warn("mqtt session not saved", "client_id", s.clientID, "err", err)
	}
}

// endSession runs once the session has ended and its reader and writer
// are done: it saves the session with its expiry time, or removes it when
// it is not to be kept, then lets a waiting takeover go on.
func (s *mqttSession) endSession() {
	defer s.markEnded()
	s.waitRestore() // its record put back, or not, before the last write (mqtt_takeover.go)
	if !s.claimed && !s.holding {
		return
	}
	if s.claimed && s.expiry > 0 {
		s.saveSession(time.Now().Add(s.expiryDuration()))
		return
	}
	// An MQTT 5 DISCONNECT set the expiry to 0: the session ends now.
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	if err := s.rt.mqttStore().DeleteMQTTSession(ctx, s.clientID, s.owner); err != nil {
		s.rt.log.Warn("mqtt session not removed", "client_id", s.clientID, "err", err)
	}
}

// storeLookup is how soon a sweeper first looks again for a session store
// that is not open on this node yet (a lookup of the bucket, one round
// trip); the pause doubles up to the sweep's period.
const storeLookup = 2 * time.Second

// startSweeper starts the goroutine that removes expired sessions, when
// the engine stores sessions; stopMQTT stops it, waitMQTT waits for it.
func (rt *Router) startSweeper() {
	st := rt.mqttStore()
	if st == nil {
		return
	}
	mq := rt.mq
	mq.sweepStop = make(chan struct{})
	mq.wg.Add(1)
	go func() {
		defer mq.wg.Done()
		// A first sweep at once: it opens the store on this node, so the
		// stored sessions gauge counts every node's from the start, and
		// sessions that expired while the gateway was down go now.
		rt.sweepSessions(st)
		counter, _ := rt.eng.(sessionCounter)
		t := time.NewTimer(mq.opts.SessionSweep)
		defer t.Stop()
		lookup := storeLookup
		for {
			// Until the store is open on this node (on JetStream: until
			// some node has made its bucket) the sweep looks for it
			// sooner, from storeLookup doubling to the sweep's period, so
			// the gauge counts other nodes' sessions soon after the first
			// is stored, and a deployment without persistent sessions
			// soon looks once a sweep only.
			d := mq.opts.SessionSweep
			if counter != nil {
				if _, ok := counter.MQTTSessionCount(); !ok {
					d = min(d, lookup)
					lookup = min(2*lookup, mq.opts.SessionSweep)
				}
			}
			t.Reset(d)
			select {
			case <-mq.sweepStop:
				return
			case <-t.C:
				rt.sweepSessions(st)
			}
		}
	}()
}

// sweepSessions removes the expired sessions once and counts what is left.
func (rt *Router) sweepSessions(st engine.MQTTSessionStore) {
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	n, left, err := st.ExpireMQTTSessions(ctx, time.Now())
	if n > 0 {
		rt.mq.sm.results.WithLabelValues("expired").Add(float64(n))
	}
	if err != nil {
		rt.log.Warn("mqtt session sweep failed", "err", err)
		return
	}
	rt.mq.sm.swept.Store(int64(left))
}

// sessionFits reports whether a persistent session may take filter as a
// new subscription within MaxSessionBytes (positions left out: the save
// drops those that do not fit).
func (s *mqttSession) sessionFits(filter string) bool {
	if !s.persist || s.filter(filter) != nil {
		return true
	}
	rec := engine.MQTTSession{ClientID: s.clientID, Owner: s.owner, Node: s.rt.sessionNode(), Epoch: s.rt.eng.Epoch()}
	for f, e := range s.subs.all() {
		if e.f == nil {
			continue
		}
		rec.Subs = append(rec.Subs, engine.MQTTSubscription{Filter: f})
	}
	rec.Subs = append(rec.Subs, engine.MQTTSubscription{Filter: filter})
	return rec.Size() <= s.rt.mq.opts.MaxSessionBytes
}

// expiryDuration is the session's expiry interval, at most
// --mqtt-max-session-expiry (a DISCONNECT may have set a longer one).
func (s *mqttSession) expiryDuration() time.Duration {
	return min(time.Duration(s.expiry)*time.Second, s.rt.mq.opts.MaxSessionExpiry)
}
