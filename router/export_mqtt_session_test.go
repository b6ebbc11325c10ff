package router

// SetMQTTBeforeRun makes every admitted MQTT connection of rt call f with
// its client id after its stored session was claimed and before its
// session runs; nil removes it.
func SetMQTTBeforeRun(rt *Router, f func(clientID string)) {
	if f == nil {
		rt.mq.beforeRun.Store(nil)
		return
	}
	rt.mq.beforeRun.Store(&f)
}
