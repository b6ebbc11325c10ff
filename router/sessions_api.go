package router

// The sessions of this node and the node's identity, for operators and the
// dashboard.
//
// GET /v1/sessions (admin) lists the WebSocket and SSE sessions open on
// this node, a page at a time in session id order (limit, cursor and
// next_cursor as every paged listing, see paging.go):
//
//	{"sessions":[{"id","transport","remote","user"?,"subscriptions",
//	  "queued","drops","node","since"}],"next_cursor"?}
//
// Every entry names its node, so that a cluster-wide listing can later merge
// the pages of several nodes. The list is built from the node's session
// table at the moment of the request: a session that opens or closes
// between two pages is listed or not according to its id, and none twice.
//
// DELETE /v1/sessions/{id} (admin) ends a session open on this node: a
// WebSocket is closed with code 4001 (CloseAdministrator) and the reason
// "closed by an administrator" after what it has queued is flushed; an
// SSE stream ends with its close event carrying the same code and reason.
// 204 once the close is under way; 404 unknown_session when no session of
// that id is open on this node. On the JetStream engine with several
// nodes, the call must reach the node holding the session (its listing
// entry names the node); ending a session held by another node is not
// done yet.
//
// GET /v1/info (any authenticated caller) answers
// {"version","engine","epoch","node"}: which gateway this is.
//
// Concurrency: both handlers only read: the session table under the
// router's lock (connList), a session's subscriptions under its own lock,
// its queue counters through session.Stats.

import (
	"net/http"
	"os"
	"reflect"
	"slices"
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
	Since         string `json:"since"`
}

// sessionRoutes registers the handlers of this file.
func (rt *Router) sessionRoutes(e *echo.Echo, admin echo.MiddlewareFunc) {
	e.GET("/v1/sessions", rt.httpSessions, admin)
	e.DELETE("/v1/sessions/:id", rt.httpEndSession, admin)
	e.GET("/v1/info", rt.httpInfo)
	rt.adminRoutes(e, admin) // admin.go
}

func (rt *Router) httpSessions(c echo.Context) error {
	pr, err := parsePage(c)
	if err != nil {
		return err
	}
	conns := rt.connList()
	slices.SortFunc(conns, func(a, b *conn) int { return strings.Compare(a.id, b.id) })
	node := nodeName()
	pw := newPageWriter("sessions", pr.limit)
	for _, cn := range conns[startAfter(len(conns), func(i int) string { return conns[i].id }, pr.after):] {
		if cn.sess == nil {
			continue // listed before its session was made: not yet a session
		}
		ok, err := pw.add(cn.id, cn.view(node))
		if err != nil {
			return err
		}
		if !ok {
			break
		}
	}
	return pw.send(c)
}

// CloseAdministrator is the WebSocket close code of a session ended by
// DELETE /v1/sessions/{id}, with the reason CloseAdministratorReason.
const (
	CloseAdministrator       websocket.StatusCode = 4001
	CloseAdministratorReason                      = "closed by an administrator"
)

func (rt *Router) httpEndSession(c echo.Context) error {
	id := param(c, "id")
	var found *conn
	for _, cn := range rt.connList() {
		if cn.id == id && cn.sess != nil {
			found = cn
			break
		}
	}
	if found == nil {
		return perr(codeUnknownSession, "no session %s is open on this node (GET /v1/sessions lists them)", quoteInput(id))
	}
	rt.log.Info("session ended by an administrator", "session", id, "user", found.info.user, "remote", found.info.remote)
	found.sess.Close(CloseAdministrator, CloseAdministratorReason)
	return c.NoContent(http.StatusNoContent)
}

// view is the session's listing entry.
func (cn *conn) view(node string) sessionView {
	cn.mu.Lock()
	subs := len(cn.subs)
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
		Since:         cn.info.since.UTC().Format(timeFormat),
	}
}

func (rt *Router) httpInfo(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{
		"version": rt.opts.Version,
		"engine":  rt.engineName(),
		"epoch":   rt.eng.Epoch(),
		"node":    nodeName(),
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
