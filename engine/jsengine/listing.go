package jsengine

// Listing. Topics loads every partition's state from NATS at most once a
// second (or at once after a topic was created or deleted); in between it
// answers from that load, with earliest and next offsets brought up to
// what the tail and this node's appends saw. Readiness probes, replaying
// subscribes and the system topics call it often. Topics live in a KV
// bucket whose watcher keeps every topic's configuration on every node,
// so listing needs no NATS call of its own: TopicsPage picks one page
// from that set (keeping only the page) and loads the partition states of
// the page's topics only, or copies them from a fresh Topics load.

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/listing"
)

// topicList keeps the last load of every topic's partition states for
// Topics and TopicsPage (see topicsCache).
type topicList struct {
	topicsMu sync.Mutex // guards topicsC; a leaf lock
	topicsC  *topicsCache
}

// Paged listing of groups (topics: TopicsPage below). Every node
// keeps every group's definition in memory (the group bucket's watcher),
// so a page is picked from that set, keeping only the page's names, and
// only the page's groups are described (Group: positions from memory,
// partition states loaded from NATS where this node has none yet).

// GroupsPage returns at most limit groups named after after, sorted by
// name, and whether more follow (see engine.Engine). A group deleted
// while the page is built is left out.
func (e *Engine) GroupsPage(ctx context.Context, after string, limit int) ([]engine.GroupInfo, bool, error) {
	p := listing.New[string](after, limit)
	e.gmu.Lock()
	for name := range e.groups {
		p.Add(name, name)
	}
	e.gmu.Unlock()
	names, more := p.Sorted()
	out := make([]engine.GroupInfo, 0, len(names))
	for _, name := range names {
		info, err := e.Group(ctx, name)
		if errors.Is(err, engine.ErrUnknownGroup) {
			continue
		}
		if err != nil {
			return nil, false, err
		}
		out = append(out, info)
	}
	return out, more, nil
}

// topicsMaxAge is how long Topics serves the partition states it loaded
// from NATS before loading them again (offsets are kept current from the
// tail meanwhile): readiness probes, replaying subscribes and the system
// topics ask often, and each load is a round trip per partition.
const topicsMaxAge = time.Second

// topicsCache is the last listing Topics loaded.
type topicsCache struct {
	at    time.Time // real time of the load
	gen   uint64    // Engine.topicsGen at the load
	ts    []*topic
	infos []engine.TopicInfo
}

// Topics returns every topic, sorted by name. Partition states are loaded
// from NATS at most once per topicsMaxAge (a topic created or deleted meanwhile
// reloads them at once); in between, earliest and next offsets come from
// what this node's tail and appends saw, and Bytes from the last load. It
// fails with an error wrapping engine.ErrUnavailable at once while NATS is
// unreachable, even when there are no topics, so it serves as a readiness
// check.
func (e *Engine) Topics(ctx context.Context) (_ []engine.TopicInfo, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return nil, err
	}
	gen := e.topicsGen.Load()
	e.topicsMu.Lock()
	c := e.topicsC
	e.topicsMu.Unlock()
	if c != nil && c.gen == gen && time.Since(c.at) < topicsMaxAge {
		return c.current(), nil
	}
	e.tmu.RLock()
	ts := slices.Collect(maps.Values(e.topics))
	e.tmu.RUnlock()
	slices.SortFunc(ts, func(a, b *topic) int { return strings.Compare(a.name, b.name) })
	c = &topicsCache{at: time.Now(), gen: gen}
	for _, t := range ts {
		info, err := e.topicInfo(ctx, t)
		if err != nil {
			if errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
				return nil, err
			}
			continue // deleted meanwhile
		}
		c.ts, c.infos = append(c.ts, t), append(c.infos, info)
	}
	e.topicsMu.Lock()
	e.topicsC = c
	e.topicsMu.Unlock()
	return c.current(), nil
}

// current returns a copy of the listing with offsets brought up to what
// the node has seen since.
func (c *topicsCache) current() []engine.TopicInfo {
	out := make([]engine.TopicInfo, 0, len(c.infos))
	for i := range c.infos {
		if info, ok := c.fresh(i); ok {
			out = append(out, info)
		}
	}
	return out
}

// page returns the cached topics of a TopicsPage, brought up to date as
// by current: it finds the cursor by binary search and copies only the
// page.
func (c *topicsCache) page(after string, limit int) ([]engine.TopicInfo, bool) {
	limit = min(max(limit, 1), listing.MaxLimit)
	i, _ := slices.BinarySearchFunc(c.ts, after, func(t *topic, name string) int { return strings.Compare(t.name, name) })
	if i < len(c.ts) && c.ts[i].name == after {
		i++
	}
	var out []engine.TopicInfo
	for ; i < len(c.ts); i++ {
		info, ok := c.fresh(i)
		if !ok {
			continue
		}
		if len(out) == limit {
			return out, true
		}
		out = append(out, info)
	}
	return out, false
}

// fresh returns the i-th cached topic with offsets brought up to what the
// node has seen since, or false when it was deleted since.
func (c *topicsCache) fresh(i int) (engine.TopicInfo, bool) {
	info, t := c.infos[i], c.ts[i]
	if t.deleted.Load() {
		return engine.TopicInfo{}, false
	}
	info.Parts = slices.Clone(info.Parts)
	for j, p := range t.parts {
		earliest, next := p.view()
		pi := &info.Parts[j]
		pi.Next = max(pi.Next, next)
		pi.Earliest = min(max(pi.Earliest, earliest), pi.Next)
		pi.Dropped = pi.Earliest
	}
	return info, true
}

// TopicsPage returns at most limit topics named after after, sorted by
// name, and whether more follow (see engine.Engine). Every node knows
// every topic's configuration (the topic bucket's watcher keeps them in
// memory), so no NATS listing is needed: the page's topics are picked from
// that set, keeping only the page, and their partition states come from
// the last Topics load while it is fresh (as Topics serves them), else
// from NATS for the page's partitions only. Like Topics it fails at once
// while NATS is unreachable.
func (e *Engine) TopicsPage(ctx context.Context, after string, limit int) (_ []engine.TopicInfo, more bool, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if err := e.reachable(); err != nil {
		return nil, false, err
	}
	gen := e.topicsGen.Load()
	e.topicsMu.Lock()
	c := e.topicsC
	e.topicsMu.Unlock()
	if c != nil && c.gen == gen && time.Since(c.at) < topicsMaxAge {
		out, more := c.page(after, limit)
		return out, more, nil
	}
	p := listing.New[*topic](after, limit)
	e.tmu.RLock()
	for name, t := range e.topics {
		p.Add(name, t)
	}
	e.tmu.RUnlock()
	ts, more := p.Sorted()
	out := make([]engine.TopicInfo, 0, len(ts))
	for _, t := range ts {
		info, err := e.topicInfo(ctx, t)
		if err != nil {
			if errors.Is(err, engine.ErrUnavailable) || ctx.Err() != nil {
				return nil, false, err
			}
			continue // deleted meanwhile
		}
		out = append(out, info)
	}
	return out, more, nil
}
