package router

// SessionQueues returns the most control bytes (replies and errors) any
// session of rt has queued right now, and how many sessions are closing.
func SessionQueues(rt *Router) (controlBytes, closing int) {
	for _, c := range rt.connList() {
		controlBytes = max(controlBytes, c.sess.Stats().ControlBytes)
		select {
		case <-c.sess.Closing():
			closing++
		default:
		}
	}
	return controlBytes, closing
}

// UnsentGroupDeliveries returns how many group deliveries the sessions of
// rt have queued and the writer has not yet reported written.
func UnsentGroupDeliveries(rt *Router) int {
	n := 0
	for _, c := range rt.connList() {
		for _, s := range connSubs(c) {
			n += len(s.unsentPositions())
		}
	}
	return n
}

// WaitRechecks waits for the re-checks of open sessions that reloads
// started (recheck.go).
func (rt *Router) WaitRechecks() { rt.rechecks.Wait() }

// connSubs returns the subscriptions c holds.
func connSubs(c *conn) []*subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	subs := make([]*subscription, 0, len(c.byID))
	for _, s := range c.byID {
		subs = append(subs, s)
	}
	return subs
}
