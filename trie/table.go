package trie

import "math/bits"

// table maps literal segments to child nodes. It is a persistent hash array
// mapped trie keyed by the 64-bit segment hashes that Match computes once
// per topic segment: each level consumes tableBits bits of the hash and
// holds only the entries present, found by a bitmap and a population count.
// Like the nodes that hold it, a table is never modified once published:
// with and without return a new table that shares every level off the path
// they change, so a write copies at most tableFan entries per level and
// there are about log32 of the table's length levels. Past the last level
// that hash bits can tell apart (hashes equal in all 64 bits), a
// collision level keeps its entries in a plain list.
type table[T comparable] struct {
	root level[T] // first level, held inline so a small table is one array
	len  int      // keys held
}

const (
	tableBits = 5
	tableFan  = 1 << tableBits // entries per level at most, one per bit of level.bits
	tableMask = tableFan - 1
)

// level is one level of a table. Below a level's shift, entries share all
// the hash bits that led to it.
type level[T comparable] struct {
	bits uint32     // bit i set: ents holds the entry for index i (unused at the collision level)
	ents []entry[T] // in index order; at the collision level, in any order
}

// entry is a key and its child, or, when next is set, a deeper level for
// the keys whose hashes share this entry's bits so far.
type entry[T comparable] struct {
	hash  uint64
	key   string
	child *node[T]
	next  *level[T]
}

// collision reports whether the level at shift is past the hash bits.
func collision(shift uint) bool { return shift >= 64 }

// get returns the child for key, whose hash is h, or nil.
func (t *table[T]) get(key string, h uint64) *node[T] {
	l := &t.root
	for shift := uint(0); ; shift += tableBits {
		if collision(shift) {
			for i := range l.ents {
				if e := &l.ents[i]; e.hash == h && e.key == key {
					return e.child
				}
			}
			return nil
		}
		bit := uint32(1) << (h >> shift & tableMask)
		if l.bits&bit == 0 {
			return nil
		}
		e := &l.ents[bits.OnesCount32(l.bits&(bit-1))]
		if e.next != nil {
			l = e.next
			continue
		}
		if e.hash == h && e.key == key {
			return e.child
		}
		return nil
	}
}

// with returns a copy of t in which key, whose hash is h, maps to child.
func (t table[T]) with(key string, h uint64, child *node[T]) table[T] {
	root, added := t.root.with(0, entry[T]{hash: h, key: key, child: child})
	out := table[T]{root: root, len: t.len}
	if added {
		out.len++
	}
	return out
}

// without returns a copy of t without key, whose hash is h, which t must
// hold.
func (t table[T]) without(key string, h uint64) table[T] {
	if t.len == 1 {
		return table[T]{}
	}
	return table[T]{root: t.root.without(0, key, h), len: t.len - 1}
}

// with returns a copy of l, a level at shift, holding the key entry e
// (replacing the entry with its key if there is one), and whether the key
// is new. l itself is not changed.
func (l *level[T]) with(shift uint, e entry[T]) (level[T], bool) {
	if collision(shift) {
		for i := range l.ents {
			if l.ents[i].hash == e.hash && l.ents[i].key == e.key {
				return level[T]{ents: replaced(l.ents, i, e)}, false
			}
		}
		return level[T]{ents: inserted(l.ents, len(l.ents), e)}, true
	}
	bit := uint32(1) << (e.hash >> shift & tableMask)
	i := bits.OnesCount32(l.bits & (bit - 1))
	if l.bits&bit == 0 {
		return level[T]{bits: l.bits | bit, ents: inserted(l.ents, i, e)}, true
	}
	old := &l.ents[i]
	switch {
	case old.next != nil:
		next, added := old.next.with(shift+tableBits, e)
		return level[T]{bits: l.bits, ents: replaced(l.ents, i, entry[T]{next: &next})}, added
	case old.hash == e.hash && old.key == e.key:
		return level[T]{bits: l.bits, ents: replaced(l.ents, i, e)}, false
	}
	// Two keys share this index: move both one level down.
	var next level[T]
	next, _ = next.with(shift+tableBits, *old)
	next, _ = next.with(shift+tableBits, e)
	return level[T]{bits: l.bits, ents: replaced(l.ents, i, entry[T]{next: &next})}, true
}

// without returns a copy of l, a level at shift, without key, whose hash is
// h, which l must hold. A deeper level left with a single key is folded
// back into its parent, so that a table shrinks as it empties and the path
// to a key is never longer than its hash requires.
func (l *level[T]) without(shift uint, key string, h uint64) level[T] {
	if collision(shift) {
		for i := range l.ents {
			if l.ents[i].hash == h && l.ents[i].key == key {
				return level[T]{ents: deleted(l.ents, i)}
			}
		}
		panic("trie: table.without: key not present")
	}
	bit := uint32(1) << (h >> shift & tableMask)
	i := bits.OnesCount32(l.bits & (bit - 1))
	old := &l.ents[i]
	if old.next == nil {
		return level[T]{bits: l.bits &^ bit, ents: deleted(l.ents, i)}
	}
	next := old.next.without(shift+tableBits, key, h)
	if len(next.ents) == 1 && next.ents[0].next == nil {
		// One key left below: it alone has these hash bits, so it can
		// sit here.
		return level[T]{bits: l.bits, ents: replaced(l.ents, i, next.ents[0])}
	}
	return level[T]{bits: l.bits, ents: replaced(l.ents, i, entry[T]{next: &next})}
}

// inserted returns a new array of ents with e inserted at i.
func inserted[T comparable](ents []entry[T], i int, e entry[T]) []entry[T] {
	out := make([]entry[T], len(ents)+1)
	copy(out, ents[:i])
	out[i] = e
	copy(out[i+1:], ents[i:])
	return out
}

// replaced returns a new array of ents with entry i replaced by e.
func replaced[T comparable](ents []entry[T], i int, e entry[T]) []entry[T] {
	out := make([]entry[T], len(ents))
	copy(out, ents)
	out[i] = e
	return out
}

// deleted returns a new array of ents without entry i, or nil if that was
// the last one.
func deleted[T comparable](ents []entry[T], i int) []entry[T] {
	if len(ents) == 1 {
		return nil
	}
	out := make([]entry[T], len(ents)-1)
	copy(out, ents[:i])
	copy(out[i:], ents[i+1:])
	return out
}
