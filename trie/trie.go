package trie

import (
	"hash/maphash"
	"strings"
	"sync"
	"sync/atomic"
)

// Trie indexes subscribers of type T by pattern, so that a published topic
// finds every pattern that matches it and that pattern's subscribers.
//
// A Trie is safe for concurrent use by multiple goroutines. Match never
// blocks: it reads an immutable snapshot while Add and Remove, serialized
// among themselves, build the next one. Make one with New; the zero value
// is an empty Trie too, but without the match cache described in the
// package documentation.
type Trie[T comparable] struct {
	cur atomic.Pointer[tree[T]] // current snapshot; nil means empty

	cache *matchCache[T] // nil: walk the tree on every Match

	mu sync.Mutex // serializes Add and Remove; Match never takes it
}

// tree is one immutable snapshot of a Trie. Once published through
// Trie.cur, neither it nor anything it reaches is modified again, with the
// one exception described at leaf.subs.
type tree[T comparable] struct {
	root     node[T]
	seed     maphash.Seed // hashes segments for every table in this tree
	gen      uint64       // counts the writes that led to this snapshot
	subs     int          // (pattern, subscriber) pairs
	patterns int          // distinct patterns
}

// node is the trie position reached after some pattern segments.
type node[T comparable] struct {
	lits  table[T] // children by literal segment
	star  *node[T] // child for '*'
	exact *leaf[T] // pattern that ends at this node
	rest  *leaf[T] // pattern that ends at this node followed by '#'
}

// leaf holds the subscribers of one pattern.
type leaf[T comparable] struct {
	pattern string
	// subs is shared between snapshots: a writer adding a subscriber appends
	// in place when there is capacity, which is safe because the element it
	// writes lies beyond the length of every published leaf that uses the
	// array. That holds as long as only the current leaf of a pattern is ever
	// appended to and removal always builds a new array (see with and
	// without). Readers get subs clipped to its length, so they cannot write
	// into the spare capacity either.
	subs []T
	// has holds every subscriber once the pattern has indexFrom of them,
	// so that Add tells a new subscriber from a present one without
	// scanning the others. It belongs to the writers: Match never reads it.
	// Successive leaves of a pattern share one map, which is current only
	// for the newest, the leaf in the current snapshot and the only one a
	// writer consults.
	has map[T]struct{}
}

// indexFrom is the number of subscribers of one pattern from which its leaf
// keeps the has index: below it, a scan of the subscribers is as fast.
const indexFrom = 64

// New returns an empty Trie with a match cache.
func New[T comparable]() *Trie[T] {
	return newTrie[T](true)
}

func newTrie[T comparable](cache bool) *Trie[T] {
	t := &Trie[T]{}
	if cache {
		t.cache = new(matchCache[T])
	}
	return t
}

// Add subscribes v to pattern. It returns an error wrapping
// ErrInvalidPattern if pattern is not valid. Adding a (pattern, v) pair that
// is already present does nothing and returns nil.
//
// Add copies the trie nodes on the pattern's path and, in each node's
// children table, the one level of at most 32 entries per 5 bits of hash
// on the way to the child, so its cost grows with the pattern's segments
// and only logarithmically with the other patterns that share a prefix; it
// does not slow down concurrent Match calls.
func (t *Trie[T]) Add(pattern string, v T) error {
	if err := ValidatePattern(pattern); err != nil {
		return err
	}
	var buf [MaxSegments]string
	segs := split(pattern, &buf)

	t.mu.Lock()
	defer t.mu.Unlock()
	next := &tree[T]{}
	if old := t.cur.Load(); old != nil {
		if l := old.root.find(segs, old.seed); l != nil && l.contains(v) {
			return nil
		}
		*next = *old
	} else {
		next.seed = maphash.MakeSeed()
	}
	if next.root.add(segs, pattern, v, next.seed) {
		next.patterns++
	}
	next.subs++
	next.gen++
	t.cur.Store(next)
	return nil
}

// Remove unsubscribes v from pattern and reports whether the pair was
// present. Like Add, it copies the nodes on the pattern's path, and the
// pattern's remaining subscribers; it prunes the nodes left empty.
func (t *Trie[T]) Remove(pattern string, v T) bool {
	var buf [MaxSegments]string
	segs := split(pattern, &buf)
	if segs == nil {
		return false
	}

	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.cur.Load()
	if old == nil {
		return false
	}
	l := old.root.find(segs, old.seed)
	if l == nil {
		return false
	}
	if !l.contains(v) {
		return false
	}
	i := l.index(v)
	next := &tree[T]{}
	*next = *old
	if next.root.remove(segs, i, old.seed) {
		next.patterns--
	}
	next.subs--
	next.gen++
	t.cur.Store(next)
	if t.cache != nil {
		t.cache.release()
	}
	return true
}

// Match calls fn once for every distinct pattern that matches topic, with
// that pattern's subscribers, in no particular order. subs is a snapshot that
// fn may read but must neither modify nor retain after it returns; it is
// never empty. Match sees the Trie as of one moment: it reflects every Add
// and Remove that returned before Match was called, and none that started
// after.
//
// Match does not validate topic; the caller does that once, on publish. An
// empty topic, or one with more than MaxSegments segments, matches nothing.
// Match allocates nothing, except once when the match cache admits a topic
// that is being published repeatedly.
func (t *Trie[T]) Match(topic string, fn func(pattern string, subs []T)) {
	tr := t.cur.Load()
	if tr == nil {
		return
	}
	if t.cache != nil {
		t.cache.match(t, tr, topic, maphash.String(tr.seed, topic), fn)
		return
	}
	tr.match(topic, fn)
}

// match is Match on one snapshot, without the cache.
func (tr *tree[T]) match(topic string, fn func(string, []T)) {
	// Split and hash every segment once; a segment is looked up at
	// several nodes.
	var buf [MaxSegments]segment
	segs := splitHash(topic, tr.seed, &buf)
	if segs == nil {
		return
	}
	r := &tr.root
	if c := r.lits.get(segs[0].s, segs[0].h); c != nil {
		c.match(segs[1:], fn)
	}
	// A pattern whose first segment is a wildcard never matches a '$' topic.
	if topic[0] == '$' {
		return
	}
	if r.rest != nil {
		fn(r.rest.pattern, r.rest.view())
	}
	if r.star != nil {
		r.star.match(segs[1:], fn)
	}
}

// Len returns the number of (pattern, subscriber) pairs.
func (t *Trie[T]) Len() int {
	if tr := t.cur.Load(); tr != nil {
		return tr.subs
	}
	return 0
}

// Patterns returns the number of distinct patterns with at least one
// subscriber.
func (t *Trie[T]) Patterns() int {
	if tr := t.cur.Load(); tr != nil {
		return tr.patterns
	}
	return 0
}

// match reports to fn the patterns at or below n that match segs, the topic
// segments that remain after the path to n.
func (n *node[T]) match(segs []segment, fn func(string, []T)) {
	if len(segs) == 0 {
		if n.exact != nil {
			fn(n.exact.pattern, n.exact.view())
		}
		return
	}
	if n.rest != nil {
		fn(n.rest.pattern, n.rest.view())
	}
	if len(segs) == 1 {
		// The children's exact patterns are all that can match; report
		// them here rather than recurse into each child.
		if c := n.lits.get(segs[0].s, segs[0].h); c != nil && c.exact != nil {
			fn(c.exact.pattern, c.exact.view())
		}
		if c := n.star; c != nil && c.exact != nil {
			fn(c.exact.pattern, c.exact.view())
		}
		return
	}
	if c := n.lits.get(segs[0].s, segs[0].h); c != nil {
		c.match(segs[1:], fn)
	}
	if n.star != nil {
		n.star.match(segs[1:], fn)
	}
}

// find returns the leaf of the pattern split into segs, or nil.
func (n *node[T]) find(segs []string, seed maphash.Seed) *leaf[T] {
	for i, seg := range segs {
		switch {
		case seg == "#":
			if i != len(segs)-1 {
				return nil
			}
			return n.rest
		case seg == "*":
			n = n.star
		default:
			n = n.lits.get(seg, maphash.String(seed, seg))
		}
		if n == nil {
			return nil
		}
	}
	return n.exact
}

// add subscribes v to the pattern split into segs below n, which the caller
// owns (a fresh copy, not yet published). Every node it changes below n is
// copied first. It reports whether the pattern is new.
func (n *node[T]) add(segs []string, pattern string, v T, seed maphash.Seed) bool {
	if len(segs) == 0 {
		var isNew bool
		n.exact, isNew = n.exact.with(pattern, v)
		return isNew
	}
	seg := segs[0]
	if seg == "#" { // validation put it last
		var isNew bool
		n.rest, isNew = n.rest.with(pattern, v)
		return isNew
	}
	h := maphash.String(seed, seg)
	c := new(node[T])
	if old := n.child(seg, h); old != nil {
		*c = *old
	}
	isNew := c.add(segs[1:], pattern, v, seed)
	n.setChild(seg, h, c)
	return isNew
}

// remove removes the i-th subscriber of the pattern split into segs, which
// must be present, from below n, which the caller owns. Nodes left empty are
// pruned. It reports whether the pattern lost its last subscriber.
func (n *node[T]) remove(segs []string, i int, seed maphash.Seed) bool {
	if len(segs) == 0 {
		var gone bool
		n.exact, gone = n.exact.without(i)
		return gone
	}
	seg := segs[0]
	if seg == "#" {
		var gone bool
		n.rest, gone = n.rest.without(i)
		return gone
	}
	h := maphash.String(seed, seg)
	c := new(node[T])
	*c = *n.child(seg, h)
	gone := c.remove(segs[1:], i, seed)
	if c.empty() {
		c = nil
	}
	n.setChild(seg, h, c)
	return gone
}

// child returns the child for seg, whose hash is h, or nil.
func (n *node[T]) child(seg string, h uint64) *node[T] {
	if seg == "*" {
		return n.star
	}
	return n.lits.get(seg, h)
}

// setChild replaces the child for seg, whose hash is h, with c, or deletes
// it when c is nil.
func (n *node[T]) setChild(seg string, h uint64, c *node[T]) {
	if seg == "*" {
		n.star = c
		return
	}
	if c == nil {
		n.lits = n.lits.without(seg, h)
		return
	}
	n.lits = n.lits.with(seg, h, c)
}

func (n *node[T]) empty() bool {
	return n.lits.len == 0 && n.star == nil && n.exact == nil && n.rest == nil
}

// with returns the leaf l (which may be nil) plus v, and whether l was nil.
// The caller has checked that v is not in l.
func (l *leaf[T]) with(pattern string, v T) (*leaf[T], bool) {
	if l == nil {
		return &leaf[T]{pattern: pattern, subs: []T{v}}, true
	}
	// Appending in place is safe; see leaf.subs.
	next := &leaf[T]{pattern: l.pattern, subs: append(l.subs, v), has: l.has}
	switch {
	case next.has != nil:
		next.has[v] = struct{}{}
	case len(next.subs) >= indexFrom:
		next.has = make(map[T]struct{}, len(next.subs))
		for _, s := range next.subs {
			next.has[s] = struct{}{}
		}
	}
	return next, false
}

// without returns l minus its i-th subscriber, or nil and true if that was
// the last one. The result never shares l's array, keeping the append in
// with safe.
func (l *leaf[T]) without(i int) (*leaf[T], bool) {
	if len(l.subs) == 1 {
		return nil, true
	}
	subs := make([]T, 0, len(l.subs)-1)
	subs = append(subs, l.subs[:i]...)
	subs = append(subs, l.subs[i+1:]...)
	next := &leaf[T]{pattern: l.pattern, subs: subs}
	if l.has != nil && len(subs) >= indexFrom/2 { // drop it well below indexFrom, not back and forth
		delete(l.has, l.subs[i])
		next.has = l.has
	}
	return next, false
}

// contains reports whether v subscribes to l's pattern.
func (l *leaf[T]) contains(v T) bool {
	if l.has != nil {
		_, ok := l.has[v]
		return ok
	}
	return l.index(v) >= 0
}

// index returns the position of v among l's subscribers, or -1.
func (l *leaf[T]) index(v T) int {
	for i, s := range l.subs {
		if s == v {
			return i
		}
	}
	return -1
}

// view returns the subscribers clipped to their length, so that a caller
// appending to them cannot write into the shared array.
func (l *leaf[T]) view() []T {
	return l.subs[:len(l.subs):len(l.subs)]
}

// segment is a topic segment and its hash.
type segment struct {
	s string
	h uint64
}

// splitHash is split for Match: it also hashes each segment with seed.
func splitHash(s string, seed maphash.Seed, buf *[MaxSegments]segment) []segment {
	if s == "" {
		return nil
	}
	n := 0
	for {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			buf[n] = segment{s, maphash.String(seed, s)}
			return buf[:n+1]
		}
		if n == MaxSegments-1 {
			return nil
		}
		buf[n] = segment{s[:i], maphash.String(seed, s[:i])}
		n++
		s = s[i+1:]
	}
}

// split cuts s at every '.' into buf and returns the segments, or nil if s
// is empty or has more than MaxSegments segments.
func split(s string, buf *[MaxSegments]string) []string {
	if s == "" {
		return nil
	}
	n := 0
	for {
		i := strings.IndexByte(s, '.')
		if i < 0 {
			buf[n] = s
			return buf[:n+1]
		}
		if n == MaxSegments-1 {
			return nil
		}
		buf[n] = s[:i]
		n++
		s = s[i+1:]
	}
}
