package router

import (
	"fmt"
	"testing"
	"time"
)

func TestHookCacheBounds(t *testing.T) {
	now := time.Unix(1000, 0)
	later := now.Add(time.Minute)
	t.Run("count", func(t *testing.T) {
		c := newHookCache(3, 1<<20)
		for i := range 5 {
			c.put(fmt.Sprint("k", i), hookCacheEntry{allow: true}, later)
		}
		if c.len() != 3 {
			t.Fatalf("%d entries, want 3", c.len())
		}
		if _, ok := c.get("k0", now); ok {
			t.Fatal("the oldest entry survived")
		}
		if _, ok := c.get("k4", now); !ok {
			t.Fatal("the newest entry is gone")
		}
	})
	t.Run("bytes", func(t *testing.T) {
		c := newHookCache(1000, 3*(hookCacheOverhead+2))
		for i := range 5 {
			c.put(fmt.Sprint("k", i), hookCacheEntry{allow: true}, later)
		}
		if c.len() != 3 || c.bytes > 3*(hookCacheOverhead+2) {
			t.Fatalf("%d entries, %d bytes", c.len(), c.bytes)
		}
		c.put("huge", hookCacheEntry{msg: string(make([]byte, 1<<10))}, later)
		if _, ok := c.get("huge", now); ok {
			t.Fatal("an entry over the byte bound was kept")
		}
	})
	t.Run("ttl and recency", func(t *testing.T) {
		c := newHookCache(2, 1<<20)
		c.put("a", hookCacheEntry{allow: true}, later)
		c.put("b", hookCacheEntry{code: "forbidden", msg: "no"}, later)
		c.get("a", now) // a is now the most recent
		c.put("c", hookCacheEntry{allow: true}, later)
		if _, ok := c.get("b", now); ok {
			t.Fatal("the least recently used entry survived")
		}
		if _, ok := c.get("a", later); ok {
			t.Fatal("an expired entry was returned")
		}
		if c.len() != 1 {
			t.Fatalf("%d entries after expiry, want 1", c.len())
		}
	})
}

func BenchmarkHookCacheGet(b *testing.B) {
	c := newHookCache(10000, 4<<20)
	now := time.Now()
	for i := range 10000 {
		c.put(fmt.Sprint("user\x00\x00rooms.", i), hookCacheEntry{allow: true}, now.Add(time.Hour))
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.get("user\x00\x00rooms.42", now)
	}
}
