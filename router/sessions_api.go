package router

// The sessions of every node and the node's identity, for operators and
// the dashboard.
//
// GET /v1/sessions (admin) lists the WebSocket, SSE and MQTT sessions open
// on every gateway node sharing the engine (sessions_cluster.go), a page
// at a time in (node, session id) order (limit, cursor and next_cursor as
// every paged listing, see paging.go):
//
//	{"sessions":[{"id","transport","remote","user"?,"subscriptions",
//	  "queued","drops","node","host","since"}],"next_cursor"?,"unanswered"?}
//
// "node" names the node holding the session (the engine's node ID, or the
// host name on an engine of one node), "host" that node's host name;
// "unanswered" counts nodes that did not answer within the bound, whose
// sessions are missing from the page.
//
// DELETE /v1/sessions/{id} (admin) ends the session on whichever node
// holds it: a WebSocket is closed with code 4001 (CloseAdministrator) and
// the reason "closed by an administrator" after what it has queued is
// flushed; an SSE stream ends with its close event carrying the same code
// and reason; an MQTT session is closed as a WebSocket is (an MQTT 5
// client gets DISCONNECT "administrative action"). 204 once the close is
// under way; 404 unknown_session when no node holds it.
//
// DELETE /v1/sessions/{id}/subscriptions/{pattern}[?group=G] (admin) ends
// one subscription (the pattern path-escaped: %23 for "#"): the client
// gets {"op":"unsubscribed","pattern","group"?,"reason":"administrator"}
// and the session stays open. 204; 404 unknown_session, 404
// not_subscribed; 400 bad_request for an MQTT session (MQTT cannot tell a
// client that one subscription ended).
//
// GET /v1/info (any authenticated caller) answers
// {"version","engine","epoch","node","host"}: which gateway this is.
//
// Concurrency: the handlers read the session table under the router's
// lock (connList), a session's subscriptions under its own lock, its queue
// counters through session.Stats, and ask the other nodes with no lock
// held.

import (
	"net/http"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
)

// sessionInfo is what a session's listing shows beyond its live counters;
// set when the session is accepted and never changed.
type sessionInfo struct {
	transport string    // "ws" or "sse"
	remote    string    // the client's address (echo's RealIP: trusted proxies honoured)
	user      string    // the credential's subject at connect; "" when none
	since     time.Time // when the session was accepted
}

// newSessionInfo records who opened a session over transport.
func newSessionInfo(c echo.Context, transport string, who *principal) sessionInfo {
	si := sessionInfo{transport: transport, remote: c.RealIP(), since: time.Now()}
	if who != nil && who != openPrincipal {
		si.user = who.Subject
	}
	return si
}

// sessionView is one entry of GET /v1/sessions.
type sessionView struct {
	ID            string `json:"id"`
	Transport     string `json:"transport"`
	Remote        string `json:"remote"`
	User          string `json:"user,omitempty"`
	Subscriptions int    `json:"subscriptions"`
	Queued        int    `json:"queued"`
	Drops         uint64 `json:"drops"`
	Node          string `json:"node"`
	Host          string `json:"host"`
	Since         string `json:"since"`
}

// sessionRoutes registers the handlers of this file.
func (rt *Router) sessionRoutes(e *echo.Echo, admin echo.MiddlewareFunc) {
	e.GET("/v1/sessions", rt.httpSessions, admin)
	e.DELETE("/v1/sessions/:id", rt.httpEndSession, admin)
	e.DELETE("/v1/sessions/:id/subscriptions/:pattern", rt.httpEndSubscription, admin)
	e.GET("/v1/info", rt.httpInfo)
	rt.adminRoutes(e, admin) // admin.go
}

func (rt *Router) httpSessions(c echo.Context) error {
	pr, err := parsePage(c)
	if err != nil {
		return err
	}
	answers, asked, err := rt.askNodes(c.Request().Context(), nodeReq{Op: "list", After: pr.after, Limit: pr.limit})
	if err != nil {
		return err
	}
	page := mergePage(answers, pr.limit)
	page.Unanswered = max(asked-len(answers), 0)
	return c.JSON(http.StatusOK, page)
}

// CloseAdministrator is the WebSocket close code of a session ended by
// DELETE /v1/sessions/{id}, with the reason CloseAdministratorReason.
const (
	CloseAdministrator       websocket.StatusCode = 4001
	CloseAdministratorReason                      = "closed by an administrator"
)

func (rt *Router) httpEndSession(c echo.Context) error {
	id := param(c, "id")
	if rt.endLocal(id) {
		return c.NoContent(http.StatusNoContent)
	}
	answers, asked, err := rt.askNodes(c.Request().Context(), nodeReq{Op: "end", ID: id})
	if err != nil {
		return err
	}
	for _, a := range answers {
		if a.Found {
			return c.NoContent(http.StatusNoContent)
		}
	}
	return rt.notFoundOnNodes(id, asked, len(answers))
}

func (rt *Router) httpEndSubscription(c echo.Context) error {
	id, pattern, group := param(c, "id"), param(c, "pattern"), c.QueryParam("group")
	found, pe := rt.unsubscribeLocal(id, pattern, group)
	if found && pe != nil {
		return pe
	}
	if found {
		return c.NoContent(http.StatusNoContent)
	}
	answers, asked, err := rt.askNodes(c.Request().Context(), nodeReq{Op: "unsubscribe", ID: id, Pattern: pattern, Group: group})
	if err != nil {
		return err
	}
	for _, a := range answers {
		if a.Found && a.Code != "" {
			return perr(a.Code, "%s", a.Message)
		}
		if a.Found {
			return c.NoContent(http.StatusNoContent)
		}
	}
	return rt.notFoundOnNodes(id, asked, len(answers))
}

// notFoundOnNodes is the error of a session no node said it holds.
func (rt *Router) notFoundOnNodes(id string, asked, answered int) error {
	if answered < asked {
		return perr(codeUnavailable, "no node that answered holds session %s, and %d of %d nodes did not answer in time; retry", quoteInput(id), asked-answered, asked)
	}
	return perr(codeUnknownSession, "no session %s is open on any node (GET /v1/sessions lists them)", quoteInput(id))
}

// view is the session's listing entry.
func (cn *conn) view(node string) sessionView {
	cn.mu.Lock()
	subs := len(cn.byID)
	cn.mu.Unlock()
	st := cn.sess.Stats()
	return sessionView{
		ID:            cn.id,
		Transport:     cn.info.transport,
		Remote:        cn.info.remote,
		User:          cn.info.user,
		Subscriptions: subs,
		Queued:        st.Queued,
		Drops:         st.Dropped,
		Node:          node,
		Host:          nodeName(),
		Since:         cn.info.since.UTC().Format(timeFormat),
	}
}

func (rt *Router) httpInfo(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{
		"version": rt.opts.Version,
		"engine":  rt.engineName(),
		"epoch":   rt.eng.Epoch(),
		"node":    rt.nodeLabel(),
		"host":    nodeName(),
	})
}

// engineName is the engine's name in /v1/info: Options.EngineName, else
// engineName of the engine.
func (rt *Router) engineName() string {
	if rt.opts.EngineName != "" {
		return rt.opts.EngineName
	}
	return engineName(rt.eng)
}

// engineName names an engine: its Name method when it has one, else the
// package of its type ("memengine", "jsengine").
func engineName(eng any) string {
	if n, ok := eng.(interface{ Name() string }); ok {
		return n.Name()
	}
	t := reflect.TypeOf(eng)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return ""
	}
	p := t.PkgPath()
	return p[strings.LastIndexByte(p, '/')+1:]
}

// nodeName is this node's name in listings: the host name.
func nodeName() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "localhost"
	}
	return h
}
