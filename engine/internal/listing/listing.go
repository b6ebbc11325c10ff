// Package listing picks one page of a name-ordered listing out of an
// unordered set, holding no more than the page: the engines' paged
// listings (engine.Engine.TopicsPage) offer every name to a Page and keep
// only the limit smallest after the cursor, so a request for a page costs
// memory in proportion to the page, not to the set.
//
// # Concurrency
//
// A Page is not safe for concurrent use; it belongs to the request that
// builds it.
package listing

import (
	"slices"
	"strings"
)

// MaxLimit caps a page's limit, so that a caller's limit cannot make a
// Page hold more than this many items.
const MaxLimit = 10000

// Page collects the limit smallest names greater than its cursor, with a
// value each. Its zero value is not usable; use New.
type Page[T any] struct {
	after string
	limit int
	items []item[T] // a max-heap on name of at most limit+1 items
}

type item[T any] struct {
	name string
	v    T
}

// New returns a Page of at most limit items (at least 1, at most
// MaxLimit) named after after; "" starts at the first name.
func New[T any](after string, limit int) *Page[T] {
	limit = min(max(limit, 1), MaxLimit)
	return &Page[T]{after: after, limit: limit}
}

// Add offers one name of the set. Names must be distinct.
func (p *Page[T]) Add(name string, v T) {
	if name <= p.after {
		return
	}
	if len(p.items) <= p.limit { // one more than the page tells whether more follow
		p.items = append(p.items, item[T]{name, v})
		p.up(len(p.items) - 1)
		return
	}
	if name >= p.items[0].name {
		return
	}
	p.items[0] = item[T]{name, v}
	p.down(0)
}

// Sorted returns the page's values in name order and whether names after
// the last of them were offered.
func (p *Page[T]) Sorted() ([]T, bool) {
	slices.SortFunc(p.items, func(a, b item[T]) int { return strings.Compare(a.name, b.name) })
	more := len(p.items) > p.limit
	if more {
		p.items = p.items[:p.limit]
	}
	out := make([]T, len(p.items))
	for i, it := range p.items {
		out[i] = it.v
	}
	return out, more
}

func (p *Page[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if p.items[parent].name >= p.items[i].name {
			return
		}
		p.items[parent], p.items[i] = p.items[i], p.items[parent]
		i = parent
	}
}

func (p *Page[T]) down(i int) {
	n := len(p.items)
	for {
		largest := i
		if l := 2*i + 1; l < n && p.items[l].name > p.items[largest].name {
			largest = l
		}
		if r := 2*i + 2; r < n && p.items[r].name > p.items[largest].name {
			largest = r
		}
		if largest == i {
			return
		}
		p.items[i], p.items[largest] = p.items[largest], p.items[i]
		i = largest
	}
}
