package memengine

// MQTTSessionCount reports how many MQTT persistent sessions the store
// holds now, holds left out (engine.MQTTSessionStore), as
// ExpireMQTTSessions counts what is left; ok is always true. Expired
// records not yet removed are counted, as they are against MaxCount.
// The router's switchyard_mqtt_sessions_stored reads it at each scrape.
func (e *Engine) MQTTSessionCount() (n int, ok bool) {
	st := &e.mqs
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.count(), true
}
