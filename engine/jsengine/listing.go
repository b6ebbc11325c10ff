package jsengine

import (
	"context"
	"errors"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/listing"
)

// Paged listing of groups (topics: TopicsPage in log.go). Every node
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
