// Package apidocs holds the gateway's machine-readable descriptions: an
// OpenAPI 3.1 document of the HTTP API (openapi.json) and an AsyncAPI 3
// document of the WebSocket and Server-Sent Events frames (asyncapi.json).
// The router serves them at GET /v1/openapi.json and GET /v1/asyncapi.json;
// package apicheck validates test traffic against them.
//
// Concurrency: the documents are embedded constants; callers must not
// modify the returned slices.
package apidocs

import _ "embed"

//go:embed openapi.json
var openAPI []byte

//go:embed asyncapi.json
var asyncAPI []byte

// OpenAPI returns the OpenAPI 3.1 document of the HTTP API.
func OpenAPI() []byte { return openAPI }

// AsyncAPI returns the AsyncAPI 3 document of the WebSocket and SSE frames.
func AsyncAPI() []byte { return asyncAPI }
