package engine

import (
	"context"
	"errors"
)

// Requests between the gateway nodes that share an engine.

// Sentinel errors of Nodes.
var (
	// ErrUnknownNode: AskNode named a node that is not live, or did not
	// answer before the context ended.
	ErrUnknownNode = errors.New("engine: unknown node")
	// ErrNodeMessageTooLarge: a request or an answer passes
	// MaxNodeMessageBytes.
	ErrNodeMessageTooLarge = errors.New("engine: node message too large")
)

// Bounds of Nodes, the same on every engine.
const (
	// MaxNodeMessageBytes bounds a request and an answer between nodes:
	// half of NATS's default max_payload (1 MiB), so that an answer with
	// its headers always fits.
	MaxNodeMessageBytes = 512 << 10
	// MaxNodeAnswers bounds how many answers AskNodes gathers.
	MaxNodeAnswers = 256
)

// Nodes is an optional capability of an Engine: requests from one gateway
// node to the others that share the engine (on jsengine, every node on the
// same NATS with the same Prefix; on memengine, the one process). Routers
// use it when their engine implements it:
//
//	if n, ok := eng.(engine.Nodes); ok { ... }
//
// The engine carries bytes and never reads them; what a request means is
// the caller's. An implementation owes:
//   - NodeID is this node's name among the nodes sharing the engine: a
//     token of letters and digits, fixed for the engine's life, different
//     from every other live node's. "" means the engine has one node only.
//   - A request reaches the handler ServeNodes installed on the node named
//     (AskNode) or on every live node, this one included (AskNodes), at
//     most once each; a node with no handler does not answer.
//   - A request or answer over MaxNodeMessageBytes is not sent: the asker
//     gets ErrNodeMessageTooLarge (an answer too large is counted as
//     refused by AskNodes, not returned).
//   - AskNodes returns once every node it counted as live has answered,
//     or when ctx ends, with the answers it has (at most MaxNodeAnswers):
//     running out of time is not an error. asked is how many nodes it
//     counted as live when it sent the request.
//
// Handlers run on goroutines of the engine, possibly several at once, and
// must return quickly. Implementations are safe for concurrent use.
type Nodes interface {
	// NodeID names this node; "" when the engine is the only node.
	NodeID() string
	// ServeNodes installs h as this node's answerer of requests; stop
	// removes it and waits for a call in progress. A second ServeNodes
	// before stop replaces the first handler.
	ServeNodes(h NodeHandler) (stop func(), err error)
	// AskNode sends req to node and returns its answer.
	AskNode(ctx context.Context, node string, req []byte) ([]byte, error)
	// AskNodes sends req to every live node and gathers their answers.
	AskNodes(ctx context.Context, req []byte) (answers []NodeAnswer, asked int, err error)
}

// NodeHandler answers a request from a node (possibly this one).
type NodeHandler func(req []byte) []byte

// NodeAnswer is one node's answer to AskNodes.
type NodeAnswer struct {
	Node string // the answering node's NodeID
	Data []byte
}
