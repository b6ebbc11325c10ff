package router

// MQTTParked reports how many of rt's MQTT sessions have their reader
// parked in the idle poller now, and whether the session of clientID
// ("" none) is one of them.
func MQTTParked(rt *Router, clientID string) (n int, parked bool) {
	rt.mq.mu.Lock()
	defer rt.mq.mu.Unlock()
	for id, s := range rt.mq.clients {
		if s.idle != nil && s.idle.Parked() {
			n++
			if id == clientID {
				parked = true
			}
		}
	}
	return n, parked
}
