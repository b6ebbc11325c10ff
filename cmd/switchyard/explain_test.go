package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestErrorTexts holds what the person at the keyboard reads for each
// error: the offending value and the fix, no Go package prefixes, UTF-8
// as written, and the flag or variable that fixes a URL or credential.
func TestErrorTexts(t *testing.T) {
	g := newGateway(t)
	other := httptest.NewServer(http.NotFoundHandler()) // not a gateway
	t.Cleanup(other.Close)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + l.Addr().String() // nothing listens there
	l.Close()
	noScheme := strings.TrimPrefix(g.URL, "http://")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		code int
		want string // the whole of stderr
	}{
		{"empty segment", nil, []string{"pub", "orders..eu", "1"}, 1,
			`switchyard pub: invalid topic "orders..eu": segment 2 is empty (segments are separated by single dots)`},
		{"utf-8 as written", nil, []string{"pub", "café", "1"}, 1,
			`switchyard pub: invalid topic "café": segment 1 has the character "é", which is not allowed (segments use only A-Z a-z 0-9 _ - :)`},
		{"nats wildcard", nil, []string{"sub", "orders.>"}, 1,
			`switchyard sub: invalid pattern "orders.>": segment 2 is ">", which is not a wildcard here: write "orders.#" ("#" as the last segment matches one or more trailing segments)`},
		{"unknown topic named", nil, []string{"topic", "show", "orders.missing"}, 1,
			`switchyard topic: unknown topic "orders.missing" (GET /v1/topics lists the topics)`},
		{"admin call without the key", nil, []string{"topic", "delete", "orders", "--yes"}, 1,
			`switchyard topic: this call needs the admin key: give it with --admin-key or SWITCHYARD_ADMIN_KEY`},
		{"wrong admin key", map[string]string{"SWITCHYARD_ADMIN_KEY": "nope"}, []string{"topics"}, 1,
			`switchyard topics: the token is invalid: the gateway refused the credential; check --token (SWITCHYARD_TOKEN) or --admin-key (SWITCHYARD_ADMIN_KEY)`},
		{"connection refused, http", map[string]string{"SWITCHYARD_URL": closed}, []string{"topics"}, 1,
			`switchyard topics: cannot connect to the gateway at ` + closed + `: connection refused; is it running there? Give its address with --url or SWITCHYARD_URL`},
		{"connection refused, websocket", map[string]string{"SWITCHYARD_URL": closed}, []string{"pub", "a", "1"}, 1,
			`switchyard pub: cannot connect to the gateway at ` + closed + `: connection refused; is it running there? Give its address with --url or SWITCHYARD_URL`},
		{"not a gateway, http", map[string]string{"SWITCHYARD_URL": other.URL}, []string{"topics"}, 1,
			`switchyard topics: the server at ` + other.URL + ` answered GET /v1/topics with HTTP 404 and no Switchyard error: is it a Switchyard gateway? Give the gateway's address with --url or SWITCHYARD_URL`},
		{"not a gateway, websocket", map[string]string{"SWITCHYARD_URL": other.URL}, []string{"pub", "a", "1"}, 1,
			`switchyard pub: the server at ` + other.URL + ` is not a Switchyard gateway: the server answered the WebSocket handshake with HTTP 404, not with a Switchyard welcome; give the gateway's address with --url or SWITCHYARD_URL`},
		{"delete without a terminal", map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}, []string{"topic", "delete", "orders"}, 2,
			"switchyard topic: topic delete removes orders and every record it holds; add --yes to do so without a terminal to confirm on\nusage: switchyard topic create NAME [--partitions N] [--max-messages N] [--max-age D] [--on-full P] [--partitioner P] | delete NAME [--yes] | show NAME"},
		{"group delete without a terminal", map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}, []string{"group", "delete", "billing"}, 2,
			"switchyard group: group delete removes billing and its committed positions; add --yes to do so without a terminal to confirm on\nusage: switchyard group show G | seek G --topic T [--partition P] (--offset N | --time T) | delete G [--yes]"},
		{"bad scheme", map[string]string{"SWITCHYARD_URL": "ftp://example.com"}, []string{"topics"}, 2,
			"switchyard topics: --url \"ftp://example.com\": the scheme must be ws, wss, http or https, as in http://127.0.0.1:8080\nusage: switchyard topics"},
		{"url without a scheme is http", map[string]string{"SWITCHYARD_URL": noScheme}, []string{"pub", "a", "1"}, 0, ""},
	}
	t.Run("stdin line", func(t *testing.T) {
		r := g.cli(t, nil, "1\n", "pub", "a..b")
		want := `switchyard pub: line 1: invalid topic "a..b": segment 2 is empty (segments are separated by single dots)`
		if r.code != 1 || strings.TrimSpace(r.stderr) != want {
			t.Errorf("exit %d, stderr\n%s\nwant\n%s", r.code, r.stderr, want)
		}
	})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := g.cli(t, tc.env, "", tc.args...)
			if r.code != tc.code || strings.TrimSpace(r.stderr) != tc.want {
				t.Errorf("exit %d, stderr\n%s\nwant exit %d and\n%s", r.code, r.stderr, tc.code, tc.want)
			}
		})
	}
}
