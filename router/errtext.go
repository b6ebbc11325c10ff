package router

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/internal/wire"
)

// The HTTP API's error bodies, written for the person who reads them: the
// message names the offending value and the fix, with <, > and & as
// themselves and UTF-8 as written (echo's c.JSON escapes them as
// \u003c…). classify (protocol.go) chooses the code and the text.

// writeErrorJSON writes {"code","message"} with status.
func writeErrorJSON(c echo.Context, status int, code, msg string) {
	b := append([]byte(`{"code":`), wire.AppendText(nil, code)...)
	b = append(b, `,"message":`...)
	b = wire.AppendText(b, msg)
	b = append(b, "}\n"...)
	_ = c.Blob(status, echo.MIMEApplicationJSON, b)
}

// noEndpoint is the message of a 404 for a path the gateway does not serve.
func noEndpoint(c echo.Context) string {
	r := c.Request()
	return "no such endpoint: " + r.Method + " " + quoteInput(r.URL.Path) + " (the HTTP API is under /v1/: /v1/topics, /v1/publish, /v1/ws, /v1/sse…; docs/protocol.md lists them)"
}

// notFound answers every unknown path under /v1/ with the JSON 404, also
// when a dashboard's file server handles the other paths.
func (rt *Router) notFound(c echo.Context) error {
	writeErrorJSON(c, http.StatusNotFound, codeNotFound, noEndpoint(c))
	return nil
}
