package router

// The index of a session's subscriptions. byID holds them by id: the
// delivery path looks a stream's subscription up by it (OnSent, OnDrop),
// and so does the MQTT layer. By pattern and group (subKey) a session
// with few subscriptions finds one by scanning byID; a second map, byKey,
// is made only once it holds more than keyIndexAt, so that an idle
// session with one subscription holds one small map, not two.

// keyIndexAt is the number of subscriptions above which a session indexes
// them by key (byKey) rather than scanning byID; at this size a scan
// costs about what a hash of the key does.
const keyIndexAt = 8

// subNamed returns the session's subscription of key, nil when none. The
// caller holds cn.mu.
func (cn *conn) subNamed(key subKey) *subscription {
	if cn.byKey != nil {
		return cn.byKey[key]
	}
	for _, s := range cn.byID {
		if s.pattern == key.pattern && s.group == key.group {
			return s
		}
	}
	return nil
}

// addLocked adds s, whose key the session does not hold, to its
// subscriptions (removeLocked takes it out). The caller holds cn.mu.
func (cn *conn) addLocked(s *subscription) {
	cn.byID[s.id] = s
	switch {
	case cn.byKey != nil:
		cn.byKey[subKey{s.pattern, s.group}] = s
	case len(cn.byID) > keyIndexAt:
		cn.byKey = make(map[subKey]*subscription, len(cn.byID))
		for _, x := range cn.byID {
			cn.byKey[subKey{x.pattern, x.group}] = x
		}
	}
}
