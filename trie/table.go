package trie

// table maps literal segments to child nodes. It is an open-addressing hash
// table with linear probing, kept at most half full, keyed by segment
// hashes that Match computes once per topic segment rather than once per
// lookup as a Go map would. Like the nodes that hold it, a table is never
// modified once published: with and without return new tables.
type table[T comparable] struct {
	slots []slot[T] // length 0 or a power of two; a nil child marks a free slot
	len   int       // slots in use
}

type slot[T comparable] struct {
	hash  uint64
	key   string
	child *node[T]
}

// get returns the child for key, whose hash is h, or nil.
func (t *table[T]) get(key string, h uint64) *node[T] {
	if t.len == 0 {
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.child == nil {
			return nil
		}
		if s.hash == h && s.key == key {
			return s.child
		}
	}
}

// with returns a copy of t in which key maps to child.
func (t table[T]) with(key string, h uint64, child *node[T]) table[T] {
	if t.get(key, h) != nil {
		out := table[T]{slots: make([]slot[T], len(t.slots)), len: t.len}
		copy(out.slots, t.slots)
		mask := uint64(len(out.slots) - 1)
		for i := h & mask; ; i = (i + 1) & mask {
			if s := &out.slots[i]; s.hash == h && s.key == key {
				s.child = child
				return out
			}
		}
	}
	size := len(t.slots)
	for size < 2*(t.len+1) {
		size = max(2*size, 2)
	}
	out := table[T]{slots: make([]slot[T], size)}
	if size == len(t.slots) {
		copy(out.slots, t.slots)
		out.len = t.len
	} else {
		out.rehash(t.slots)
	}
	out.put(slot[T]{hash: h, key: key, child: child})
	return out
}

// without returns a copy of t without key, which it must hold.
func (t table[T]) without(key string, h uint64) table[T] {
	if t.len == 1 {
		return table[T]{}
	}
	size := len(t.slots)
	for size > 2 && 4*(t.len-1) <= size {
		size /= 2
	}
	out := table[T]{slots: make([]slot[T], size)}
	for _, s := range t.slots {
		if s.child != nil && (s.hash != h || s.key != key) {
			out.put(s)
		}
	}
	return out
}

func (t *table[T]) rehash(from []slot[T]) {
	for _, s := range from {
		if s.child != nil {
			t.put(s)
		}
	}
}

// put inserts s, whose key t does not hold, into a free slot.
func (t *table[T]) put(s slot[T]) {
	mask := uint64(len(t.slots) - 1)
	i := s.hash & mask
	for t.slots[i].child != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
	t.len++
}
