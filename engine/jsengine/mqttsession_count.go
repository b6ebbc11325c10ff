package jsengine

// MQTTSessionCount reports how many MQTT persistent sessions this node's
// view of the store holds, holds left out: every node's records, as the
// bucket's watch has applied them (mqttsession.go), from memory with no
// call to the network. Expired records not yet swept are counted. ok is
// false until the store has been opened on this node (its first session
// call or sweep), when the view holds nothing yet. The router's
// switchyard_mqtt_sessions_stored reads it at each scrape.
func (e *Engine) MQTTSessionCount() (n int, ok bool) {
	r := &e.mqs
	if !r.isStarted() {
		return 0, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.view) - r.holds, true
}
