package memengine

import (
	"context"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/listing"
)

// Paged listing of groups (topics: TopicsPage in log.go). Like
// TopicsPage, a page visits every group's name but keeps only the page's.

// GroupsPage returns at most limit groups named after after, sorted by
// name, and whether more follow (see engine.Engine).
func (e *Engine) GroupsPage(ctx context.Context, after string, limit int) ([]engine.GroupInfo, bool, error) {
	p := listing.New[*group](after, limit)
	e.gmu.Lock()
	for name, g := range e.groups {
		p.Add(name, g)
	}
	e.gmu.Unlock()
	gs, more := p.Sorted()
	out := make([]engine.GroupInfo, 0, len(gs))
	for _, g := range gs {
		g.mu.Lock()
		if !g.deleted {
			out = append(out, e.groupInfo(g))
		}
		g.mu.Unlock()
	}
	return out, more, nil
}
