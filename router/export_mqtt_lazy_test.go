package router

// MQTTSessionMapsMade reports, for the MQTT session of clientID on rt,
// which of its maps guarded by the in-flight lock are made (inflight, rx,
// groupAcks); ok false when no session holds the id.
func MQTTSessionMapsMade(rt *Router, clientID string) (made []string, ok bool) {
	rt.mq.mu.Lock()
	s := rt.mq.clients[clientID]
	rt.mq.mu.Unlock()
	if s == nil {
		return nil, false
	}
	s.imu.Lock()
	defer s.imu.Unlock()
	if s.inflight != nil {
		made = append(made, "inflight")
	}
	if s.rx != nil {
		made = append(made, "rx")
	}
	if s.groupAcks != nil {
		made = append(made, "groupAcks")
	}
	return made, true
}
