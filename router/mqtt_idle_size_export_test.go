package router

// MQTTStoredParts returns how many MQTT sessions rt has and how many of
// them made the part of a session with a stored record (mqttStored).
func MQTTStoredParts(rt *Router) (sessions, parts int) {
	for _, c := range rt.connList() {
		if c.mqtt == nil {
			continue
		}
		sessions++
		rt.mq.mu.Lock()
		if c.mqtt.mqttStored != nil {
			parts++
		}
		rt.mq.mu.Unlock()
	}
	return sessions, parts
}
