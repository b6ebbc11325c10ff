package router

// Client-id takeover across the gateways of a cluster (docs/mqtt.md,
// "Client ids"). On one gateway the client-id index (mqttState.clients)
// ends the earlier connection of a client id; across gateways the session
// store orders the connections. On a store shared by several nodes
// (engine.MQTTSessionWatcher, jsengine) every connection claims its client
// id's record as it connects: a persistent session its stored session, any
// other a hold (a record with no expiry, engine.MQTTSession.IsHold, removed
// when the connection ends). The store takes claims one after the other
// (on JetStream, by the key's revision), and every node's view applies them
// in that order and tells this file (sessionChanged, on the store's watch
// goroutine) of each: a record claimed by a connection of another node
// while a connection of this node holds the id ends that connection (MQTT
// 5: DISCONNECT 0x8E session taken over; 3.1.1: a close), counted in
// switchyard_mqtt_takeovers_total{where="remote"}.
//
// A removal is no takeover (every connection claims its id; none removes
// another's record): a record removed while its connection lives (another
// gateway's sweep found this node gone for a moment, and a hold's expiry
// is 0) is put back by this node (restoreRecord), with a save that stores
// it only while the store holds no other connection's record
// (engine.MQTTSession.Restore), on a goroutine of its own (the watch
// goroutine may not call the store), at most restoreTries times.
//
// A connection is listed in the client-id index only once its claim is in
// this node's view, and then reads the view once more (checkHolder): a
// later claim is either applied before that read (the read sees it) or
// after the listing (sessionChanged finds the connection). Claims of this
// node's own connections are left to the client-id index, which lets the
// connection listed last win and claim again (reclaimSession).
//
// No network call is made under a lock: the handler takes mqttState.mu (a
// leaf) to find the connection and ends it with a close that does not
// wait. A persistent session taken over this way cannot save its last
// positions (its save finds the record moved): the new connection resumes
// from the previous save, at least once. While NATS is unreachable no
// change reaches this node: its connections run on until the watcher,
// resumed after the reconnect, applies what it missed, and ends those
// whose id another gateway's connection claimed meanwhile (and CONNECTs
// through this node are refused, 0x88, since the store does not answer).

import (
	"context"
	"errors"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// mqttWatcher returns the engine's store of sessions shared by several
// nodes, nil when it has none (one node: the client-id index is enough).
func (rt *Router) mqttWatcher() engine.MQTTSessionWatcher {
	if rt.mqttStore() == nil || rt.sessionNode() == "" {
		return nil
	}
	w, _ := rt.eng.(engine.MQTTSessionWatcher)
	return w
}

// watchHolders installs the handler of the store's changes; stopMQTT
// removes it.
func (rt *Router) watchHolders() {
	if w := rt.mqttWatcher(); w != nil {
		rt.mq.unwatch = w.WatchMQTTSessions(rt.sessionChanged)
	}
}

// sessionChanged handles one change of the store (the store's watch
// goroutine; returns at once): the record of clientID is now owner's, a
// connection of node ("" both: removed).
func (rt *Router) sessionChanged(clientID, owner, node string) {
	if owner != "" && node == rt.sessionNode() {
		return // this node's own: the client-id index orders them
	}
	mq := rt.mq
	mq.mu.Lock()
	s := mq.clients[clientID]
	if s == nil || !s.watched || s.owner == owner {
		mq.mu.Unlock()
		return
	}
	if owner == "" {
		rt.restoreLocked(s) // removed, not claimed: put back
		mq.mu.Unlock()
		return
	}
	mq.mu.Unlock()
	rt.takenOverRemote(s)
}

// checkHolder ends s, just listed in the client-id index, when the store's
// view already holds a later claim of its id by another node's connection;
// it puts s's record back when the view has none (removed meanwhile).
func (rt *Router) checkHolder(s *mqttSession) {
	w := rt.mqttWatcher()
	if w == nil || !s.watched {
		return
	}
	owner, node, ok := w.MQTTSessionHolder(s.clientID)
	switch {
	case !ok:
		mq := rt.mq
		mq.mu.Lock()
		if mq.clients[s.clientID] == s {
			rt.restoreLocked(s)
		}
		mq.mu.Unlock()
	case owner != s.owner && node != rt.sessionNode():
		rt.takenOverRemote(s)
	}
}

// restoreTries bounds the saves of one restore of a removed record;
// restoreBackoff is the wait after a failed one, doubled each time.
const (
	restoreTries   = 3
	restoreBackoff = 100 * time.Millisecond
)

// restoreLocked starts the goroutine that puts s's removed record back,
// or, while one runs, has it put it back once more. The caller holds
// mq.mu and found s in the client-id index, so the connection's count in
// mq.wg is held while the goroutine's is added. The goroutine exits once
// the record is back, s has left the index, or its tries are spent;
// endSession waits for it before its own last write.
func (rt *Router) restoreLocked(s *mqttSession) {
	if s.mqttStored == nil {
		s.mqttStored = new(mqttStored) // a session that holds its id only
	}
	if s.restoring != nil {
		s.restoreAgain = true
		return
	}
	done := make(chan struct{})
	s.restoring = done
	rt.mq.wg.Add(1)
	go func() {
		defer rt.mq.wg.Done()
		defer close(done)
		for rt.restoreRecord(s) {
		}
	}()
}

// restoreRecord puts s's record back (restoreLocked's goroutine),
// reporting whether to do it again (a removal came meanwhile). No lock is
// held across the store's calls.
func (rt *Router) restoreRecord(s *mqttSession) (again bool) {
	mq := rt.mq
	rec := engine.MQTTSession{ClientID: s.clientID, Owner: s.owner, Node: rt.sessionNode(), Restore: true, Epoch: rt.eng.Epoch()}
	if s.persist {
		// The subscriptions are the reader's: the reader's next save
		// (a SUBSCRIBE, an UNSUBSCRIBE, the end) writes them again.
		rec.Expiry = s.keepFor
	}
	wait := restoreBackoff
	for try := 0; try < restoreTries; try++ {
		mq.mu.Lock()
		listed := mq.clients[s.clientID] == s
		mq.mu.Unlock()
		if !listed {
			break
		}
		// The session's context ends with it (runEnd): its end then
		// makes the last write.
		ctx, cancel := context.WithTimeout(s.cn.ctx, sessionTimeout)
		err := rt.mqttStore().SaveMQTTSession(ctx, rec, mq.sessionLimits())
		cancel()
		if err == nil {
			rt.log.Info("mqtt client id's record removed while its connection lived: put back", "client_id", s.clientID)
			break
		}
		if errors.Is(err, engine.ErrMQTTSessionMoved) {
			break // another connection claimed it: the watcher ends s
		}
		rt.log.Warn("mqtt client id's removed record not put back", "client_id", s.clientID, "try", try+1, "err", err)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-s.cn.ctx.Done():
		}
		t.Stop()
		wait *= 2
	}
	mq.mu.Lock()
	defer mq.mu.Unlock()
	if again = s.restoreAgain && mq.clients[s.clientID] == s; !again {
		s.restoring = nil
	}
	s.restoreAgain = false
	return again
}

// waitRestore waits for s's restore goroutine, if one runs: endSession's
// first step, once s has left the client-id index (no new one starts).
func (s *mqttSession) waitRestore() {
	mq := s.rt.mq
	mq.mu.Lock()
	var done chan struct{}
	if s.mqttStored != nil {
		done = s.restoring
	}
	mq.mu.Unlock()
	if done != nil {
		<-done
	}
}

// mqttStored is the part of an mqttSession that only a session with a
// stored record uses: made at admission for one that may resume a stored
// session or keep its own (a CONNECT without clean start, or with a
// session expiry), or by the first restore of its removed record
// (restoreLocked) for one that holds its client id only. Its fields are
// promoted into mqttSession: code that reaches them (openSession's
// keepFor, the resume's dup) runs only for such a session; waitRestore
// looks for the part first.
type mqttStored struct {
	keepFor      time.Duration       // a persistent session's expiry at connect, for a restored record; set before run
	restoring    chan struct{}       // closed when the goroutine putting back a removed record exits; nil: none (under mqttState.mu)
	dup          map[dupKey]struct{} // records in flight when it was saved (mqtt_session_track.go)
	restoreAgain bool                // a removal came while restoring ran (under mqttState.mu)
}

// takenOverRemote ends s, whose client id a connection of another gateway
// took, once.
func (rt *Router) takenOverRemote(s *mqttSession) {
	if !s.disc.CompareAndSwap(0, uint32(rcTakenOver)) {
		return // ending already
	}
	rt.mq.m.takeovers.WithLabelValues("remote").Inc()
	rt.log.Info("mqtt session taken over through another gateway", "client_id", s.clientID)
	s.cn.sess.Close(closeStatusMQTT, "session taken over")
}

// claimHold claims a hold of s's client id: admission's step for a session
// that is not kept, on a store of several nodes. It returns the CONNACK
// reason code of a refusal.
func (rt *Router) claimHold(ctx context.Context, s *mqttSession) byte {
	rec := engine.MQTTSession{ClientID: s.clientID, Owner: s.owner, Node: rt.sessionNode(), Claim: true, Epoch: rt.eng.Epoch()}
	if err := rt.mqttStore().SaveMQTTSession(ctx, rec, rt.mq.sessionLimits()); err != nil {
		rt.mq.sm.results.WithLabelValues("failed").Inc()
		rt.log.Warn("mqtt client id not held", "client_id", s.clientID, "err", err)
		return rcServerUnavailable
	}
	s.holding, s.watched = true, true
	return rcSuccess
}

// reclaimHold claims s's hold again (reclaimSession).
func (s *mqttSession) reclaimHold() {
	rec := engine.MQTTSession{ClientID: s.clientID, Owner: s.owner, Node: s.rt.sessionNode(), Claim: true, Epoch: s.rt.eng.Epoch()}
	ctx, cancel := context.WithTimeout(context.Background(), sessionTimeout)
	defer cancel()
	if err := s.rt.mqttStore().SaveMQTTSession(ctx, rec, s.rt.mq.sessionLimits()); err != nil && !errors.Is(err, engine.ErrMQTTSessionMoved) {
		s.rt.log.Warn("mqtt client id not held again", "client_id", s.clientID, "err", err)
	}
}
