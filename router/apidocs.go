package router

// The machine-readable descriptions of the gateway's protocol, kept beside
// the code that implements it and served by the gateway itself:
//
//   - GET /v1/openapi.json: an OpenAPI 3.1 document of the whole HTTP API
//     (every route the router registers; a test fails for a route it does
//     not describe).
//   - GET /v1/asyncapi.json: an AsyncAPI 3 document of the WebSocket
//     (GET /v1/ws) and Server-Sent Events (GET /v1/sse) frames, with a JSON
//     Schema for every client and gateway frame and the error codes of
//     internal/wire.
//
// The documents live in package apidocs. docs/protocol.md is the prose
// both describe. The router's, the gateway command's and the Go client's
// tests validate every HTTP response and every frame they see against
// them (package apidocs/apicheck), and the golden transcripts of
// internal/wire against the frame schemas.
// Like every /v1 call, the documents need a credential when the gateway
// has keys.
//
// Concurrency: the documents are embedded constants; serving them only
// reads.

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/router/apidocs"
)

// apiDocRoutes registers the handlers of this file.
func (rt *Router) apiDocRoutes(e *echo.Echo) {
	e.GET("/v1/openapi.json", serveDoc(apidocs.OpenAPI()))
	e.GET("/v1/asyncapi.json", serveDoc(apidocs.AsyncAPI()))
}

func serveDoc(doc []byte) echo.HandlerFunc {
	return func(c echo.Context) error {
		c.Response().Header().Set("Cache-Control", "no-cache")
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, doc)
	}
}
