package client

// DroppedThrough reports the end (exclusive) of the local gap the
// subscription holds for a (topic, partition), or 0 when it holds none:
// tests use it as a barrier for drops that have happened but are not yet
// reported.
func DroppedThrough(s *Subscription, topic string, partition int) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g := s.localGaps[partKey{topic, partition}]; g != nil {
		return g.To
	}
	return 0
}
