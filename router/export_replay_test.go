package router

import "time"

// CatchingUp returns how many plain subscriptions of rt's sessions have not
// switched to the live tail yet.
func CatchingUp(rt *Router) int {
	n := 0
	for _, c := range rt.connList() {
		c.mu.Lock()
		for _, s := range c.byID {
			if s.group == "" && !s.isLive.Load() {
				n++
			}
		}
		c.mu.Unlock()
	}
	return n
}

// SetReplayRetryMax sets how long a catch-up retries an unavailable read,
// until the returned function puts the default back.
func SetReplayRetryMax(d time.Duration) (restore func()) {
	old := replayRetryMax
	replayRetryMax = d
	return func() { replayRetryMax = old }
}
