package memengine

// engine.Nodes on the one node an in-memory engine has: a request goes to
// this process's handler and nowhere else.

import (
	"context"
	"fmt"
	"sync"

	"github.com/switchyard/switchyard/engine"
)

var _ engine.Nodes = (*Engine)(nil)

// nodeServer holds the handler ServeNodes installed.
type nodeServer struct {
	mu sync.RWMutex // guards following; held (shared) while the handler runs
	h  engine.NodeHandler
	id uint64 // counts ServeNodes calls: a stop removes only its own handler
}

// NodeID is "": an in-memory engine is the only node.
func (e *Engine) NodeID() string { return "" }

// ServeNodes installs h; stop removes it once no call is running.
func (e *Engine) ServeNodes(h engine.NodeHandler) (stop func(), err error) {
	e.nodes.mu.Lock()
	e.nodes.h = h
	e.nodes.id++
	id := e.nodes.id
	e.nodes.mu.Unlock()
	return func() {
		e.nodes.mu.Lock()
		if e.nodes.id == id {
			e.nodes.h = nil
		}
		e.nodes.mu.Unlock()
	}, nil
}

// AskNode calls this node's handler when node is this node ("").
func (e *Engine) AskNode(ctx context.Context, node string, req []byte) ([]byte, error) {
	if node != "" {
		return nil, fmt.Errorf("memengine: node %q: %w", node, engine.ErrUnknownNode)
	}
	ans, ok, err := e.askLocal(ctx, req)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, fmt.Errorf("memengine: this node serves no requests: %w", engine.ErrUnknownNode)
	}
	return ans, nil
}

// AskNodes asks this node, the only one.
func (e *Engine) AskNodes(ctx context.Context, req []byte) ([]engine.NodeAnswer, int, error) {
	ans, ok, err := e.askLocal(ctx, req)
	if err != nil || !ok {
		return nil, 1, err
	}
	return []engine.NodeAnswer{{Node: "", Data: ans}}, 1, nil
}

// askLocal runs the handler on req, within the bounds every engine keeps.
func (e *Engine) askLocal(ctx context.Context, req []byte) ([]byte, bool, error) {
	if len(req) > engine.MaxNodeMessageBytes {
		return nil, false, fmt.Errorf("memengine: request of %d bytes: %w", len(req), engine.ErrNodeMessageTooLarge)
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	e.nodes.mu.RLock()
	defer e.nodes.mu.RUnlock()
	if e.nodes.h == nil {
		return nil, false, nil
	}
	ans := e.nodes.h(req)
	if len(ans) > engine.MaxNodeMessageBytes {
		return nil, false, fmt.Errorf("memengine: answer of %d bytes: %w", len(ans), engine.ErrNodeMessageTooLarge)
	}
	return ans, true, nil
}
