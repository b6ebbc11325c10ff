package router

// Views of the paced replay of persistent MQTT sessions
// (mqtt_session_replay.go) for the tests of package router_test.

// ReplayBudgetWaiting reports whether a catch-up of one of rt's
// persistent MQTT sessions waits on its session's replay budget.
func ReplayBudgetWaiting(rt *Router) bool {
	for _, c := range rt.connList() {
		s := c.mqtt
		if s == nil || s.trk == nil {
			continue
		}
		s.trk.replay.mu.Lock()
		waiting := s.trk.replay.freed != nil
		s.trk.replay.mu.Unlock()
		if waiting {
			return true
		}
	}
	return false
}

// CatchUpPending returns how many live records the catch-ups of rt's
// sessions buffered.
func CatchUpPending(rt *Router) int {
	n := 0
	for _, c := range rt.connList() {
		subs := connSubs(c)
		for _, s := range subs {
			s.mu.Lock()
			n += len(s.pending)
			s.mu.Unlock()
		}
	}
	return n
}

// ReplayBudgetOut returns the replayed deliveries and bytes the
// replay budgets of rt's persistent MQTT sessions have out.
func ReplayBudgetOut(rt *Router) (n, bytes int) {
	for _, c := range rt.connList() {
		s := c.mqtt
		if s == nil || s.trk == nil {
			continue
		}
		s.trk.replay.mu.Lock()
		n += s.trk.replay.n
		bytes += s.trk.replay.bytes
		s.trk.replay.mu.Unlock()
	}
	return n, bytes
}
