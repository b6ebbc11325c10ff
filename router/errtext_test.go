package router_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/switchyard/switchyard/router"
)

// TestErrorTexts holds the HTTP API's error bodies byte for byte: each
// names the offending value and the fix, carries no Go package prefix,
// shows UTF-8 and <, >, & as written, and unknown paths answer the JSON
// 404 (also beside a dashboard's file server).
func TestErrorTexts(t *testing.T) {
	g := newGateway(t)
	dash := newGateway(t, func(c *gwConfig) { c.router.Static = fstest.MapFS{"index.html": {Data: []byte("<html>")}} })
	authed := newGateway(t, func(c *gwConfig) {
		c.router.Auth = router.AuthOptions{HMACSecrets: [][]byte{hmacSecret}, AdminKey: adminKey}
	})
	token := "Bearer " + hs256(t, claims([]string{"a.#"}, []string{"a.#"}, nil))
	tests := []struct {
		name         string
		gw           *gateway
		method, path string
		body         string
		status       int
		want         string
		auth         string // the Authorization header; none when empty
	}{
		{"no credential names the header", authed, "GET", "/v1/openapi.json", "", 401,
			`{"code":"unauthorized","message":"a token is required: send a token or the admin key in the Authorization header as \"Bearer <token>\""}`, ""},
		{"no credential on an admin call", authed, "POST", "/v1/admin/reload", "{}", 401,
			`{"code":"unauthorized","message":"a token is required: send a token or the admin key in the Authorization header as \"Bearer <token>\""}`, ""},
		{"not a bearer credential", authed, "GET", "/v1/topics", "", 401,
			`{"code":"unauthorized","message":"the Authorization header is not a bearer credential: send a token or the admin key in the Authorization header as \"Bearer <token>\""}`, "Basic YWRtaW46YWRtaW4="},
		{"a token on an admin call", authed, "POST", "/v1/topics", `{"name":"a.b"}`, 403,
			`{"code":"forbidden","message":"this call needs the admin key: send it in the Authorization header as \"Bearer <admin key>\""}`, token},
		{"no credential on a websocket", authed, "GET", "/v1/ws", "", 401,
			`{"code":"unauthorized","message":"a token is required: send it in the Authorization header as \"Bearer <token>\" or as the token query parameter"}`, ""},
		{"no credential on an event stream", authed, "GET", "/v1/sse?pattern=a.b", "", 401,
			`{"code":"unauthorized","message":"a token is required: send it in the Authorization header as \"Bearer <token>\" or as the token query parameter"}`, ""},
		{"empty segment", g, "POST", "/v1/publish", `{"topic":"orders..eu","data":1}`, 400,
			`{"code":"invalid_topic","message":"invalid topic \"orders..eu\": segment 2 is empty (segments are separated by single dots)"}`, ""},
		{"utf-8 as written", g, "POST", "/v1/publish", `{"topic":"café","data":1}`, 400,
			`{"code":"invalid_topic","message":"invalid topic \"café\": segment 1 has the character \"é\", which is not allowed (segments use only A-Z a-z 0-9 _ - :)"}`, ""},
		{"nats wildcard, no html escaping", g, "GET", "/v1/sse?pattern=orders.%3E", "", 400,
			`{"code":"invalid_pattern","message":"invalid pattern \"orders.>\": segment 2 is \">\", which is not a wildcard here: write \"orders.#\" (\"#\" as the last segment matches one or more trailing segments)"}`, ""},
		{"sse pattern cut at #", g, "GET", "/v1/sse?pattern=orders.#", "", 400,
			`{"code":"invalid_pattern","message":"invalid pattern \"orders.\": segment 2 is empty: the pattern ends in a dot; for every topic under \"orders\" write \"orders.#\" (in a URL, \"orders.%23\")"}`, ""},
		{"unknown topic named", g, "GET", "/v1/topics/orders.missing", "", 404,
			`{"code":"unknown_topic","message":"unknown topic \"orders.missing\" (GET /v1/topics lists the topics)"}`, ""},
		{"unknown group named", g, "GET", "/v1/groups/billing", "", 404,
			`{"code":"unknown_group","message":"unknown group \"billing\" (GET /v1/groups lists the groups)"}`, ""},
		{"unknown path", g, "GET", "/v1/nothing", "", 404,
			`{"code":"not_found","message":"no such endpoint: GET \"/v1/nothing\" (the HTTP API is under /v1/: /v1/topics, /v1/publish, /v1/ws, /v1/sse…; docs/protocol.md lists them)"}`, ""},
		{"unknown path beside a dashboard", dash, "GET", "/v1/nothing", "", 404,
			`{"code":"not_found","message":"no such endpoint: GET \"/v1/nothing\" (the HTTP API is under /v1/: /v1/topics, /v1/publish, /v1/ws, /v1/sse…; docs/protocol.md lists them)"}`, ""},
		{"unknown path outside /v1", g, "GET", "/nothing", "", 404,
			`{"code":"not_found","message":"no such endpoint: GET \"/nothing\" (the HTTP API is under /v1/: /v1/topics, /v1/publish, /v1/ws, /v1/sse…; docs/protocol.md lists them)"}`, ""},
		{"unknown post path", g, "POST", "/v1/nothing", "{}", 404,
			`{"code":"not_found","message":"no such endpoint: POST \"/v1/nothing\" (the HTTP API is under /v1/: /v1/topics, /v1/publish, /v1/ws, /v1/sse…; docs/protocol.md lists them)"}`, ""},
		{"unknown method", g, "PUT", "/v1/topics", "{}", 405,
			`{"code":"method_not_allowed","message":"method not allowed"}`, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader
			if tc.body != "" {
				body = strings.NewReader(tc.body)
			}
			req, err := http.NewRequest(tc.method, tc.gw.srv.URL+tc.path, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			resp, err := tc.gw.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || strings.TrimSpace(string(got)) != tc.want {
				t.Errorf("%s %s = %d\n%s\nwant %d\n%s", tc.method, tc.path, resp.StatusCode, got, tc.status, tc.want)
			}
			if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}
