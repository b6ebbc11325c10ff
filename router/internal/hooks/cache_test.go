package hooks

import (
	"fmt"
	"testing"
	"time"
)

func TestCacheBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	later := now.Add(time.Minute)
	t.Run("count", func(t *testing.T) {
		c := NewCache(3, 1<<20)
		for i := range 5 {
			c.Put(fmt.Sprint("k", i), CacheEntry{Allow: true}, later)
		}
		if c.Len() != 3 {
			t.Fatalf("%d entries, want 3", c.Len())
		}
		if _, ok := c.Get("k0", now); ok {
			t.Fatal("the oldest entry survived")
		}
		if _, ok := c.Get("k4", now); !ok {
			t.Fatal("the newest entry is gone")
		}
	})
	t.Run("bytes", func(t *testing.T) {
		c := NewCache(1000, 3*(cacheOverhead+2))
		for i := range 5 {
			c.Put(fmt.Sprint("k", i), CacheEntry{Allow: true}, later)
		}
		if c.Len() != 3 || c.bytes > 3*(cacheOverhead+2) {
			t.Fatalf("%d entries, %d bytes", c.Len(), c.bytes)
		}
		c.Put("huge", CacheEntry{Msg: string(make([]byte, 1<<10))}, later)
		if _, ok := c.Get("huge", now); ok {
			t.Fatal("an entry over the byte bound was kept")
		}
	})
	t.Run("ttl and recency", func(t *testing.T) {
		c := NewCache(2, 1<<20)
		c.Put("a", CacheEntry{Allow: true}, later)
		c.Put("b", CacheEntry{Code: "forbidden", Msg: "no"}, later)
		c.Get("a", now) // a is now the most recent
		c.Put("c", CacheEntry{Allow: true}, later)
		if _, ok := c.Get("b", now); ok {
			t.Fatal("the least recently used entry survived")
		}
		if _, ok := c.Get("a", later); ok {
			t.Fatal("an expired entry was returned")
		}
		if c.Len() != 1 {
			t.Fatalf("%d entries after expiry, want 1", c.Len())
		}
	})
}

func BenchmarkCacheGet(b *testing.B) {
	c := NewCache(10000, 4<<20)
	now := time.Now()
	for i := range 10000 {
		c.Put(fmt.Sprint("user\x00\x00rooms.", i), CacheEntry{Allow: true}, now.Add(time.Hour))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.Get("user\x00\x00rooms.42", now)
	}
}
