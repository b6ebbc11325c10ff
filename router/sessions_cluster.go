package router

// The sessions API across every gateway node sharing the engine.
//
// GET /v1/sessions and the DELETE calls of sessions_api.go go through
// engine.Nodes: the node that gets the call broadcasts a request to every
// node sharing its engine (itself included) over the engine's own
// connection (on jsengine, NATS subjects under its Prefix) and merges the
// answers. An engine without engine.Nodes is one node: the request is
// answered here.
//
// Listing is paged in (node, id) order: each node answers with its
// sessions after the cursor's (node, id), at most the page's limit and
// sessionsAnswerBytes; the page holds the first limit of the merged
// answers up to the smallest last key of a node that had more (so no
// session of that node is skipped), and its cursor is the (node, id) of
// its last entry. A session that opens or closes between two pages is
// listed or not according to its key, and none twice. A node that does not
// answer within sessionsAskTimeout is missing from the page, which says
// how many nodes did not ("unanswered"): a bounded wait, never a hang.
//
// An end (DELETE /v1/sessions/{id}) or an end of one subscription is
// tried on this node first, then broadcast: the node holding the session
// acts and says so; 404 unknown_session when every node answered that it
// has none, 503 unavailable when some did not answer.
//
// Concurrency: the handlers of node requests run on the engine's
// goroutines and only read the session table (connList) and act on one
// session, as the HTTP handlers do; nodeLink.stop is set by New and read
// by Shutdown.

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

const (
	// sessionsAskTimeout bounds how long a sessions call waits for the
	// other nodes' answers: long enough for a NATS round trip under load,
	// short enough for an operator's listing to come back with what it has.
	sessionsAskTimeout = 2 * time.Second
	// sessionsAnswerBytes bounds the sessions one node puts in one answer:
	// room for a full page (MaxPageLimit entries of a few hundred bytes)
	// within an engine's node message bound.
	sessionsAnswerBytes = engine.MaxNodeMessageBytes - 4<<10
)

// nodeLink is this Router's end of engine.Nodes.
type nodeLink struct {
	nodes engine.Nodes // nil: the engine is one node
	stop  func()
}

// nodeReq is a sessions request from one node to the others.
type nodeReq struct {
	Op      string `json:"op"` // "list", "end" or "unsubscribe"
	After   string `json:"after,omitempty"`
	Limit   int    `json:"limit,omitempty"`
	ID      string `json:"id,omitempty"`
	Pattern string `json:"pattern,omitempty"`
	Group   string `json:"group,omitempty"`
}

// nodeAns is a node's answer: its sessions (list), or whether it holds the
// session and, when it refused, why (end, unsubscribe).
type nodeAns struct {
	Sessions []sessionView `json:"sessions,omitempty"`
	More     bool          `json:"more,omitempty"`
	Found    bool          `json:"found,omitempty"`
	Code     string        `json:"code,omitempty"`
	Message  string        `json:"message,omitempty"`
}

// startNodes starts answering other nodes' sessions requests, when the
// engine links nodes.
func (rt *Router) startNodes() {
	n, ok := rt.eng.(engine.Nodes)
	if !ok {
		return
	}
	stop, err := n.ServeNodes(rt.answerNode)
	if err != nil {
		rt.log.Warn("sessions of other nodes will not be listed or ended from this one", "err", err)
		return
	}
	rt.nodes = nodeLink{nodes: n, stop: stop}
}

// stopNodes stops answering them; Shutdown calls it.
func (rt *Router) stopNodes() {
	if rt.nodes.stop != nil {
		rt.nodes.stop()
	}
}

// nodeLabel is this node's "node" in listings: the engine's NodeID, or
// the host name when the engine is the only node.
func (rt *Router) nodeLabel() string {
	if rt.nodes.nodes != nil {
		if id := rt.nodes.nodes.NodeID(); id != "" {
			return id
		}
	}
	return nodeName()
}

// answerNode answers one request of another node (or of this one).
func (rt *Router) answerNode(data []byte) []byte {
	var req nodeReq
	var ans nodeAns
	if err := json.Unmarshal(data, &req); err != nil {
		ans.Code, ans.Message = codeBadRequest, "a sessions request this node cannot read"
	} else {
		ans = rt.answerLocal(req)
	}
	out, _ := json.Marshal(ans)
	return out
}

// answerLocal answers req about this node's sessions.
func (rt *Router) answerLocal(req nodeReq) nodeAns {
	switch req.Op {
	case "list":
		return rt.listLocal(req.After, req.Limit)
	case "end":
		return nodeAns{Found: rt.endLocal(req.ID)}
	case "unsubscribe":
		found, pe := rt.unsubscribeLocal(req.ID, req.Pattern, req.Group)
		ans := nodeAns{Found: found}
		if pe != nil {
			ans.Code, ans.Message = pe.Code, pe.Msg
		}
		return ans
	}
	return nodeAns{Code: codeBadRequest, Message: fmt.Sprintf("unknown sessions request %q", req.Op)}
}

// sessionKey orders the sessions of every node: node, then id (a space
// sorts before every character of either).
func sessionKey(node, id string) string { return node + " " + id }

// listLocal lists this node's sessions whose key is after after, at most
// limit and sessionsAnswerBytes of them, in key order.
func (rt *Router) listLocal(after string, limit int) nodeAns {
	limit = min(max(limit, 1), MaxPageLimit)
	node := rt.nodeLabel()
	conns := rt.connList()
	slices.SortFunc(conns, func(a, b *conn) int { return strings.Compare(a.id, b.id) })
	var ans nodeAns
	size := 0
	for _, cn := range conns {
		if cn.sess == nil || after != "" && sessionKey(node, cn.id) <= after {
			continue // not yet a session, or listed on an earlier page
		}
		if len(ans.Sessions) == limit {
			ans.More = true
			break
		}
		v := cn.view(node)
		b, _ := json.Marshal(v)
		if len(ans.Sessions) > 0 && size+len(b)+1 > sessionsAnswerBytes {
			ans.More = true
			break
		}
		size += len(b) + 1
		ans.Sessions = append(ans.Sessions, v)
	}
	return ans
}

// endLocal ends the session id if it is open on this node.
func (rt *Router) endLocal(id string) bool {
	cn := rt.findConn(id)
	if cn == nil {
		return false
	}
	rt.log.Info("session ended by an administrator", "session", id, "user", cn.info.user, "remote", cn.info.remote)
	cn.sess.Close(CloseAdministrator, CloseAdministratorReason)
	return true
}

// UnsubscribedAdministratorReason is the reason of the unsubscribed frame
// of a subscription ended by DELETE /v1/sessions/{id}/subscriptions/{pattern}.
const UnsubscribedAdministratorReason = "administrator"

// unsubscribeLocal ends the session id's subscription to pattern (of
// group, "" for a plain one) if the session is open on this node; the
// client is told with an unsubscribed frame of reason "administrator".
func (rt *Router) unsubscribeLocal(id, pattern, group string) (bool, *protoError) {
	cn := rt.findConn(id)
	if cn == nil {
		return false, nil
	}
	if cn.kind == transportMQTT {
		return true, perr(codeBadRequest, "session %s is an MQTT session, which cannot be told that one subscription ended; end the session instead (DELETE /v1/sessions/%s)", id, id)
	}
	cn.mu.Lock()
	s := cn.subNamed(subKey{pattern, group})
	ok := s != nil
	if ok {
		cn.removeLocked(s)
	}
	cn.mu.Unlock()
	if !ok {
		return true, perr(codeNotSubscribed, "session %s has no subscription to %s%s", id, quoteInput(pattern), groupSuffix(group))
	}
	rt.dropSub(s)
	rt.log.Info("subscription ended by an administrator", "session", id, "pattern", pattern, "group", group)
	fields := map[string]any{"pattern": s.pattern, "reason": UnsubscribedAdministratorReason}
	if group != "" {
		fields["group"] = group
	}
	cn.sess.Send(session.Item{Frame: encodeReply("unsubscribed", nil, fields)})
	return true, nil
}

func groupSuffix(group string) string {
	if group == "" {
		return ""
	}
	return " in group " + quoteInput(group)
}

// findConn returns the session id open on this node, or nil.
func (rt *Router) findConn(id string) *conn {
	for _, cn := range rt.connList() {
		if cn.id == id && cn.sess != nil {
			return cn
		}
	}
	return nil
}

// askNodes sends req to every node and decodes their answers; asked is how
// many nodes were asked. Bounded by sessionsAskTimeout. When the engine
// cannot ask (its connection is down), this node answers alone.
func (rt *Router) askNodes(ctx context.Context, req nodeReq) (answers []nodeAns, asked int, err error) {
	if rt.nodes.nodes == nil {
		return []nodeAns{rt.answerLocal(req)}, 1, nil
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, sessionsAskTimeout)
	defer cancel()
	raw, asked, err := rt.nodes.nodes.AskNodes(ctx, data)
	if err != nil {
		// The other nodes cannot be asked (NATS down): this node's own
		// answer, the others counted as unanswered.
		rt.log.Warn("the other gateway nodes could not be asked about sessions", "err", err)
		return []nodeAns{rt.answerLocal(req)}, max(asked, 1), nil
	}
	for _, a := range raw {
		var ans nodeAns
		if json.Unmarshal(a.Data, &ans) != nil {
			rt.log.Warn("a node's sessions answer does not decode", "node", a.Node)
			continue
		}
		answers = append(answers, ans)
	}
	return answers, asked, nil
}

// sessionsPage is the reply of GET /v1/sessions.
type sessionsPage struct {
	Sessions   []sessionView `json:"sessions"`
	NextCursor string        `json:"next_cursor,omitempty"`
	// Unanswered counts the nodes that did not answer in time: their
	// sessions are missing from this page.
	Unanswered int `json:"unanswered,omitempty"`
}

// mergePage merges the nodes' list answers into one page of at most limit
// entries (see the top of this file).
func mergePage(answers []nodeAns, limit int) sessionsPage {
	var all []sessionView
	cutoff := ""
	for _, a := range answers {
		all = append(all, a.Sessions...)
		if a.More && len(a.Sessions) > 0 {
			last := a.Sessions[len(a.Sessions)-1]
			if k := sessionKey(last.Node, last.ID); cutoff == "" || k < cutoff {
				cutoff = k
			}
		}
	}
	slices.SortFunc(all, func(a, b sessionView) int {
		return strings.Compare(sessionKey(a.Node, a.ID), sessionKey(b.Node, b.ID))
	})
	page := sessionsPage{Sessions: []sessionView{}}
	size := 0
	for i, v := range all {
		k := sessionKey(v.Node, v.ID)
		b, _ := json.Marshal(v)
		full := len(page.Sessions) == limit || len(page.Sessions) > 0 && size+len(b) > MaxPageBytes
		if full || cutoff != "" && k > cutoff {
			break
		}
		size += len(b) + 1
		page.Sessions = append(page.Sessions, v)
		if i == len(all)-1 && cutoff == "" {
			return page // every node's last session is on this page
		}
	}
	if n := len(page.Sessions); n > 0 {
		last := page.Sessions[n-1]
		page.NextCursor = encodeCursor(sessionKey(last.Node, last.ID))
	}
	return page
}
