package hooks

import (
	"container/list"
	"sync"
	"time"
)

// Cache is a bounded LRU of subscribe answers, by key (the router uses
// user, group and pattern). It is safe for
// concurrent use; mu is a leaf lock.
type Cache struct {
	maxCount, maxBytes int

	mu    sync.Mutex // guards the fields below
	bytes int
	order *list.List // of *cacheItem, most recent first
	items map[string]*list.Element
}

// CacheEntry is one cached answer: allowed, or refused with a code and
// message.
type CacheEntry struct {
	Allow     bool
	Code, Msg string
}

type cacheItem struct {
	key     string
	entry   CacheEntry
	expires time.Time
}

// cacheOverhead approximates the bytes of an entry beyond its strings.
const cacheOverhead = 160

func (it *cacheItem) size() int {
	return len(it.key) + len(it.entry.Code) + len(it.entry.Msg) + cacheOverhead
}

// NewCache makes a cache of at most count entries and bytes bytes.
func NewCache(count, bytes int) *Cache {
	return &Cache{maxCount: count, maxBytes: bytes, order: list.New(), items: map[string]*list.Element{}}
}

// Get returns the entry of key unless it has expired at now.
func (c *Cache) Get(key string, now time.Time) (CacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return CacheEntry{}, false
	}
	it := el.Value.(*cacheItem)
	if !now.Before(it.expires) {
		c.removeLocked(el)
		return CacheEntry{}, false
	}
	c.order.MoveToFront(el)
	return it.entry, true
}

// Put caches e under key until expires, dropping the least recently used
// entries past the bounds; an entry larger than the byte bound is not kept.
func (c *Cache) Put(key string, e CacheEntry, expires time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.removeLocked(el)
	}
	it := &cacheItem{key: key, entry: e, expires: expires}
	if it.size() > c.maxBytes {
		return
	}
	c.items[key] = c.order.PushFront(it)
	c.bytes += it.size()
	for len(c.items) > c.maxCount || c.bytes > c.maxBytes {
		c.removeLocked(c.order.Back())
	}
}

func (c *Cache) removeLocked(el *list.Element) {
	it := c.order.Remove(el).(*cacheItem)
	delete(c.items, it.key)
	c.bytes -= it.size()
}

// Len is the number of entries.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}
