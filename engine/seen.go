package engine

// SeenReader is an optional capability of an Engine: reading a partition
// from the state the engine keeps in memory, with no round trip to a
// backing store. A caller that pairs the log with the live feed (a
// replaying subscription registers its Observer, reads the log, then
// delivers what the observer buffered past the offset the reads ended at)
// can use it in place of Read: what it does not return yet reaches the
// engine's observers afterwards.
//
// The router uses it through a type assertion; an engine whose Read is
// already served from memory need not implement it.
type SeenReader interface {
	// ReadSeen is Read answered from records this engine's observers have
	// been told of (or are being told of): up to limit records from offset
	// from (clamped up to the earliest retained) and the offset after the
	// last one returned. ok is false when the engine cannot answer from
	// memory (the records are not held, the partition's state was never
	// loaded, retention may be due); the caller then calls Read. An
	// unknown topic or partition is also reported with ok false.
	ReadSeen(topic string, partition int, from int64, limit int) (recs []*Record, next int64, ok bool)
}
