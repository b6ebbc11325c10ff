package trie

import (
	"math/bits"
	"sync/atomic"
)

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
//
// An entry holds its topic's subscribers as they were. Invalid after a
// Remove, it would still keep the removed ones reachable (a closed
// session with its queue) until another topic took its slot, which never
// happens to a topic no longer published; so Remove empties every slot
// filled since the last Remove (release), and an entry stored by a Match
// that raced a Remove is taken back by that Match.
//
// A Match marks its slot in filled after storing the entry, and release
// empties the marked slots, a word of marks at a time. Marks are bits, so
// a Match stopped between the two steps loses no other Match's mark. Let
// R be the first Remove to publish a snapshot after the Match loaded its
// own: either R reads the mark, after the store, and empties the slot, or
// the mark comes after R read the word, so after R published, and the
// Match sees its snapshot stale and takes the entry back.
type matchCache[T comparable] struct {
	slots [cacheSlots]atomic.Pointer[cacheEntry[T]]
	seen  [cacheSlots]atomic.Uint64 // last miss in each slot: topic hash mixed with generation
	// filled marks the slots stored since the last release, a bit each.
	filled [cacheSlots / 64]atomic.Uint64

	// listing, when not nil, runs in a Match that admits an entry, after
	// it stored the entry and before it marks the slot: tests use it to
	// stop a Match there while other calls run. Nil outside tests.
	listing func()
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
func (c *matchCache[T]) match(t *Trie[T], tr *tree[T], topic string, h uint64, fn func(string, []T)) {
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
	if c.listing != nil {
		c.listing()
	}
	c.filled[i/64].Or(1 << (i % 64))
	// A Remove that made tr stale may have read the marks before this
	// one: take e back. One that comes later finds e marked.
	if t.cur.Load() != tr {
		c.slots[i].CompareAndSwap(e, nil)
	}
	for _, hit := range e.hits {
		fn(hit.pattern, hit.subs)
	}
}

// release empties the slots filled since the last release, so that no
// entry keeps a removed subscriber reachable. Remove calls it after
// storing the new snapshot, with the Trie's write lock held.
func (c *matchCache[T]) release() {
	for w := range c.filled {
		if c.filled[w].Load() == 0 {
			continue
		}
		for m := c.filled[w].Swap(0); m != 0; m &= m - 1 {
			c.slots[w*64+bits.TrailingZeros64(m)].Store(nil)
		}
	}
}
