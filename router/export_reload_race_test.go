package router

// SetBeforeRegister makes every subscribe of rt call f after its grants
// were checked and before it is registered; nil removes it.
func SetBeforeRegister(rt *Router, f func()) {
	if f == nil {
		rt.beforeRegister.Store(nil)
		return
	}
	rt.beforeRegister.Store(&f)
}
