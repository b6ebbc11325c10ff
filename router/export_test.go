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
