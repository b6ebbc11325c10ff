package jsengine

// engine.Nodes over the engine's NATS connection. Every node that serves
// requests subscribes to <prefix>.node.<its NodeID> (AskNode) and to
// <prefix>.nodes (AskNodes, a broadcast); an answer goes to the asker's
// inbox with the answering node in the header Sy-Node, or with Sy-Error
// "too_large" instead of an answer over engine.MaxNodeMessageBytes.
// AskNodes counts the live nodes (the live bucket's node keys, as
// membership.go sees them) when it sends, and stops gathering once as
// many answered.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
)

var _ engine.Nodes = (*Engine)(nil)

const (
	stopFlushWait = 2 * time.Second // bounds ServeNodes' stop
	nodeHeader    = "Sy-Node"
	nodeErrHeader = "Sy-Error"
)

// nodeServer holds the handler ServeNodes installed and its subscriptions.
type nodeServer struct {
	mu   sync.RWMutex // guards following; held (shared) while the handler runs
	h    engine.NodeHandler
	subs []*nats.Subscription
}

func (e *Engine) nodeSubject(node string) string { return e.prefix + ".node." + node }
func (e *Engine) nodesSubject() string           { return e.prefix + ".nodes" }

// NodeID is this node's ID, random per Engine.
func (e *Engine) NodeID() string { return e.node }

// ServeNodes subscribes to this node's request subjects; the callbacks run
// on goroutines of the NATS client. stop unsubscribes, waits for a
// handler call in progress and for the server to have the unsubscribes
// (at most stopFlushWait).
func (e *Engine) ServeNodes(h engine.NodeHandler) (stop func(), err error) {
	ns := &e.nodeSrv
	ns.mu.Lock()
	defer ns.mu.Unlock()
	for _, s := range ns.subs {
		_ = s.Unsubscribe()
	}
	ns.subs, ns.h = nil, h
	for _, subj := range []string{e.nodeSubject(e.node), e.nodesSubject()} {
		s, err := e.nc.Subscribe(subj, e.nodeMsg)
		if err != nil {
			for _, s := range ns.subs {
				_ = s.Unsubscribe()
			}
			ns.subs, ns.h = nil, nil
			return nil, unavailable("node request subscription", err)
		}
		ns.subs = append(ns.subs, s)
	}
	mine := ns.subs
	return func() {
		ns.mu.Lock()
		defer ns.mu.Unlock()
		if len(ns.subs) == 0 || ns.subs[0] != mine[0] {
			return // replaced by a later ServeNodes
		}
		for _, s := range ns.subs {
			_ = s.Unsubscribe()
		}
		ns.subs, ns.h = nil, nil
		// Once the server has the unsubscribes, a request to this node
		// finds no responder at once instead of waiting out its asker.
		_ = e.nc.FlushTimeout(stopFlushWait)
	}, nil
}

// nodeMsg answers one request with the installed handler.
func (e *Engine) nodeMsg(msg *nats.Msg) {
	if msg.Reply == "" {
		return
	}
	ns := &e.nodeSrv
	ns.mu.RLock()
	h := ns.h
	var ans []byte
	if h != nil {
		ans = h(msg.Data)
	}
	ns.mu.RUnlock()
	if h == nil {
		return
	}
	out := nats.NewMsg(msg.Reply)
	out.Header.Set(nodeHeader, e.node)
	if len(ans) > engine.MaxNodeMessageBytes {
		out.Header.Set(nodeErrHeader, "too_large")
	} else {
		out.Data = ans
	}
	_ = e.nc.PublishMsg(out)
}

// AskNode sends req to node's subject and waits for its answer.
func (e *Engine) AskNode(ctx context.Context, node string, req []byte) ([]byte, error) {
	if len(req) > engine.MaxNodeMessageBytes {
		return nil, fmt.Errorf("jsengine: request of %d bytes: %w", len(req), engine.ErrNodeMessageTooLarge)
	}
	if !prefixRE.MatchString(node) {
		return nil, fmt.Errorf("jsengine: node %q: %w", node, engine.ErrUnknownNode)
	}
	m := nats.NewMsg(e.nodeSubject(node))
	m.Data = req
	ans, err := e.nc.RequestMsgWithContext(ctx, m)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, fmt.Errorf("jsengine: node %q: %w", node, engine.ErrUnknownNode)
	case err != nil && ctx.Err() != nil:
		return nil, fmt.Errorf("jsengine: node %q did not answer: %w (%w)", node, engine.ErrUnknownNode, ctx.Err())
	case err != nil:
		return nil, unavailable("node request", err)
	case ans.Header.Get(nodeErrHeader) != "":
		return nil, fmt.Errorf("jsengine: node %q answered over %d bytes: %w", node, engine.MaxNodeMessageBytes, engine.ErrNodeMessageTooLarge)
	}
	return ans.Data, nil
}

// AskNodes broadcasts req and gathers the answers into an inbox of its
// own, until every node live when it sent has answered or ctx ends.
func (e *Engine) AskNodes(ctx context.Context, req []byte) ([]engine.NodeAnswer, int, error) {
	if len(req) > engine.MaxNodeMessageBytes {
		return nil, 0, fmt.Errorf("jsengine: request of %d bytes: %w", len(req), engine.ErrNodeMessageTooLarge)
	}
	e.gmu.Lock()
	asked := len(e.nodes)
	e.gmu.Unlock()
	inbox := nats.NewInbox()
	sub, err := e.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, asked, unavailable("node answers subscription", err)
	}
	defer sub.Unsubscribe() //nolint:errcheck // the inbox is ours alone
	_ = sub.SetPendingLimits(engine.MaxNodeAnswers, engine.MaxNodeAnswers*(engine.MaxNodeMessageBytes+1024))
	if err := e.nc.PublishRequest(e.nodesSubject(), inbox, req); err != nil {
		return nil, asked, unavailable("node request", err)
	}
	var out []engine.NodeAnswer
	seen := make(map[string]bool, asked)
	for len(seen) < min(asked, engine.MaxNodeAnswers) {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // ctx ended (or the connection closed): what came is the answer
		}
		node := m.Header.Get(nodeHeader)
		if node == "" || seen[node] {
			continue
		}
		seen[node] = true
		if m.Header.Get(nodeErrHeader) == "" {
			out = append(out, engine.NodeAnswer{Node: node, Data: m.Data})
		}
	}
	return out, asked, nil
}
