package router

import "weak"

// SessionIndexes returns, summed over the sessions of rt, the
// subscriptions they hold and the entries of their key indexes (the
// subscriptions themselves while a session scans them instead).
func SessionIndexes(rt *Router) (subs, indexed int) {
	for _, c := range rt.connList() {
		c.mu.Lock()
		subs += len(c.byID)
		if c.byKey != nil {
			indexed += len(c.byKey)
		} else {
			indexed += len(c.byID)
		}
		c.mu.Unlock()
	}
	return subs, indexed
}

// TrackSubscriptions returns a function that reports how many of the
// subscriptions the sessions of rt hold now are still reachable.
func TrackSubscriptions(rt *Router) func() int {
	var ws []weak.Pointer[subscription]
	for _, c := range rt.connList() {
		c.mu.Lock()
		for _, s := range c.byID {
			ws = append(ws, weak.Make(s))
		}
		c.mu.Unlock()
	}
	return func() int {
		n := 0
		for _, w := range ws {
			if w.Value() != nil {
				n++
			}
		}
		return n
	}
}

// SessionPipes returns how many sessions rt has and how many of them
// hold a publish pipeline.
func SessionPipes(rt *Router) (sessions, pipes int) {
	for _, c := range rt.connList() {
		sessions++
		if c.publishPipe() != nil {
			pipes++
		}
	}
	return sessions, pipes
}
