package trie

import "sync/atomic"

// cacheSlots is the number of topics a matchCache holds at most: enough
// for the hot topics of a busy gateway, small enough (64 KiB of slots) to
// stay out of the way.
const cacheSlots = 4096

// matchCache remembers Match results for recently published topics. It is
// direct-mapped: a topic's hash picks its one slot. An entry is valid only
// for the snapshot generation it was computed from, so every Add or Remove
// invalidates the whole cache at the cost of one comparison per lookup.
//
// A topic is admitted on its second consecutive miss in its slot within one
// generation (seen remembers the last miss), so topics that do not repeat
// before the next write do not allocate entries only to lose them.
type matchCache[T comparable] struct {
	slots [cacheSlots]atomic.Pointer[cacheEntry[T]]
	seen  [cacheSlots]atomic.Uint64 // last miss in each slot: topic hash mixed with generation
}

type cacheEntry[T comparable] struct {
	gen   uint64 // tree.gen the entry was computed from
	topic string
	hits  []cacheHit[T]
}

type cacheHit[T comparable] struct {
	pattern string
	subs    []T // a clipped view, as Match hands out
}

// match is Trie.Match through the cache, for topics whose hash is h.
func (c *matchCache[T]) match(tr *tree[T], topic string, h uint64, fn func(string, []T)) {
	i := h & (cacheSlots - 1)
	if e := c.slots[i].Load(); e != nil && e.gen == tr.gen && e.topic == topic {
		for _, hit := range e.hits {
			fn(hit.pattern, hit.subs)
		}
		return
	}
	// Admit only a topic that misses twice within one generation: one that
	// repeats faster than the Trie changes, which is when an entry pays.
	if door := h ^ tr.gen*0x9e3779b97f4a7c15; c.seen[i].Load() != door {
		c.seen[i].Store(door)
		tr.match(topic, fn)
		return
	}
	e := &cacheEntry[T]{gen: tr.gen, topic: topic}
	tr.match(topic, func(pattern string, subs []T) {
		e.hits = append(e.hits, cacheHit[T]{pattern, subs})
	})
	c.slots[i].Store(e)
	for _, hit := range e.hits {
		fn(hit.pattern, hit.subs)
	}
}
