package jsengine

// Latest value. A replaying subscribe (the router's "from":"last" over a
// wildcard, or any catch-up) reads through engine.SeenReader: ReadSeen
// answers from the partition's view and cache, with no round trip, when
// the state was loaded once and the records asked for are cached and not
// past MaxAge; records this node's tail has not announced yet reach the
// subscription live. So {"last": N} over thousands of topics costs the
// listing's load (two direct gets per partition, at most once a second)
// plus, for records older than the cache holds, one Read per partition.

import (
	"github.com/switchyard/switchyard/engine"
)

// ReadSeen implements engine.SeenReader from the partition's view and the
// tail's cache of its newest records (which also holds the last record
// each load of the partition's state fetched): no round trip. It answers
// only when the partition's state was loaded at least once (so the
// earliest offset is known), every record asked for from the clamped
// offset on is in the cache, and none of them is past the topic's MaxAge
// on the engine's clock (age retention is applied by Read). Records another
// node stored that this node's tail has not announced yet are not
// returned: the tail announces them to observers next. A count purge made
// by another node is anticipated: the view never starts before the newest
// MaxMessages.
func (e *Engine) ReadSeen(topicName string, partition int, from int64, limit int) ([]*engine.Record, int64, bool) {
	if e.reachable() != nil {
		return nil, 0, false
	}
	t := e.local(topicName)
	if t == nil || t.deleted.Load() || partition < 0 || partition >= len(t.parts) {
		return nil, 0, false
	}
	p := t.parts[partition]
	if !p.loaded.Load() {
		return nil, 0, false
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	earliest := p.earliest
	if m := t.cfg.MaxMessages; m > 0 {
		earliest = max(earliest, p.next-m)
	}
	from = min(max(from, earliest), p.next)
	n := int(min(int64(max(limit, 0)), p.next-from))
	if n == 0 {
		return []*engine.Record{}, from, true
	}
	if len(p.cache) == 0 {
		return nil, 0, false
	}
	base := p.cache[0].rec.Offset
	if from < base || from >= base+int64(len(p.cache)) {
		return nil, 0, false
	}
	i := int(from - base)
	if t.cfg.MaxAge > 0 && e.clock.Now().Sub(p.cache[i].rec.Time) >= t.cfg.MaxAge {
		return nil, 0, false
	}
	n = min(n, len(p.cache)-i)
	recs := make([]*engine.Record, n)
	for j := range recs {
		recs[j] = p.cache[i+j].rec
	}
	return recs, from + int64(n), true
}
