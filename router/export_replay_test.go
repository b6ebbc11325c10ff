package router

// CatchingUp returns how many plain subscriptions of rt's sessions have not
// switched to the live tail yet.
func CatchingUp(rt *Router) int {
	n := 0
	for _, c := range rt.connList() {
		c.mu.Lock()
		for _, s := range c.subs {
			if s.group == "" && !s.isLive.Load() {
				n++
			}
		}
		c.mu.Unlock()
	}
	return n
}
