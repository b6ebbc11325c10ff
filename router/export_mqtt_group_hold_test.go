package router

// MQTTGroupHeld returns, summed over the MQTT sessions of rt, the group
// deliveries held for room in their windows (mqtt_group.go).
func MQTTGroupHeld(rt *Router) int {
	n := 0
	for _, c := range rt.connList() {
		s := c.mqtt
		if s == nil {
			continue
		}
		s.imu.Lock()
		if h := s.groupHeld; h != nil {
			n += len(h.q)
		}
		s.imu.Unlock()
	}
	return n
}
