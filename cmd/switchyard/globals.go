package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/client"
)

// defaultURL is where the gateway listens by default (its --addr :8080).
const defaultURL = "http://127.0.0.1:8080"

// globals are the settings every command shares.
type globals struct {
	env      environment
	url      string
	token    string
	adminKey string
	json     autoBool
	timeout  time.Duration
	fs       *flag.FlagSet // the command's flags, for its -h
	http     *http.Client
}

func newGlobals(env environment) *globals {
	g := &globals{env: env, http: &http.Client{}}
	g.url = env.getenv("SWITCHYARD_URL")
	if g.url == "" {
		g.url = defaultURL
	}
	g.token = env.getenv("SWITCHYARD_TOKEN")
	g.adminKey = env.getenv("SWITCHYARD_ADMIN_KEY")
	return g
}

// flagSet returns a flag set for the command name that also accepts the
// global flags.
func (g *globals) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&g.url, "url", g.url, "the gateway's base URL, ws:// or http:// (env SWITCHYARD_URL)")
	fs.StringVar(&g.token, "token", g.token, "JWT for the WebSocket and the HTTP API (env SWITCHYARD_TOKEN)")
	fs.StringVar(&g.adminKey, "admin-key", g.adminKey, "admin key for admin calls (env SWITCHYARD_ADMIN_KEY)")
	fs.Var(&g.json, "json", "print JSON lines (default: when stdout is not a terminal)")
	fs.DurationVar(&g.timeout, "timeout", 10*time.Second, "bound on each request")
	g.fs = fs
	return fs
}

// jsonOut reports whether output is JSON lines.
func (g *globals) jsonOut() bool {
	if g.json.set {
		return g.json.value
	}
	return !g.env.tty
}

// autoBool is a boolean flag whose absence means "decide for me".
type autoBool struct{ set, value bool }

func (b *autoBool) IsBoolFlag() bool { return true }
func (b *autoBool) String() string {
	if !b.set {
		return "auto"
	}
	return strconv.FormatBool(b.value)
}
func (b *autoBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	b.set, b.value = true, v
	return nil
}

// base returns the gateway's HTTP base URL (no trailing slash): ws and wss
// become http and https, and a trailing /v1/ws is dropped.
//
// A URL without a scheme ("localhost:8080") is taken as http://.
func (g *globals) base() (*url.URL, error) {
	raw := g.url
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil {
		return nil, usagef("--url %q is not a URL (%v); give the gateway's base URL, such as http://127.0.0.1:8080", g.url, errors.Unwrap(err))
	}
	switch u.Scheme {
	case "http", "https":
	case "ws":
		u.Scheme = "http"
	case "wss":
		u.Scheme = "https"
	default:
		return nil, usagef("--url %q: the scheme must be ws, wss, http or https, as in http://127.0.0.1:8080", g.url)
	}
	if u.Host == "" {
		return nil, usagef("--url %q names no host; give the gateway's base URL, such as http://127.0.0.1:8080", g.url)
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(u.Path, "/"), "/v1/ws")
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// wsURL returns the gateway's WebSocket endpoint.
func (g *globals) wsURL() (string, error) {
	u, err := g.base()
	if err != nil {
		return "", err
	}
	u.Scheme = map[string]string{"http": "ws", "https": "wss"}[u.Scheme]
	u.Path += "/v1/ws"
	return u.String(), nil
}

// dial connects the Go client to the gateway.
func (g *globals) dial(ctx context.Context) (*client.Client, error) {
	u, err := g.wsURL()
	if err != nil {
		return nil, err
	}
	return client.Dial(ctx, u, &client.Options{Token: g.wsToken(), RequestTimeout: g.timeout})
}

// wsToken is the WebSocket's credential: the token, else the admin key
// (the gateway takes it as a token that may do everything).
func (g *globals) wsToken() string {
	if g.token != "" {
		return g.token
	}
	return g.adminKey
}

// apiError is an error reply of the HTTP API.
type apiError struct {
	Method  string `json:"-"`
	Path    string `json:"-"`
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *apiError) Error() string {
	if e.Code == "" {
		return fmt.Sprintf("%s %s: HTTP %d", e.Method, e.Path, e.Status)
	}
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// call makes one HTTP API call: body (when not nil) is sent as JSON, and a
// 2xx reply is decoded into out (when not nil). The bearer credential is
// the admin key when set, else the token.
func (g *globals) call(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u, err := g.base()
	if err != nil {
		return err
	}
	u.Path += path
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	var rd io.Reader = http.NoBody
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(ctx, g.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if cred := g.adminKey; cred != "" {
		req.Header.Set("Authorization", "Bearer "+cred)
	} else if g.token != "" {
		req.Header.Set("Authorization", "Bearer "+g.token)
	}
	resp, err := g.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		e := &apiError{Method: method, Path: path, Status: resp.StatusCode}
		_ = json.Unmarshal(data, e)
		return e
	}
	if out == nil || len(bytes.TrimSpace(data)) == 0 {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s %s: bad reply: %w", method, path, err)
	}
	return nil
}

// emit prints v as one JSON line.
func (g *globals) emit(v any) error {
	// Without HTML escaping: a record's data is printed as the gateway
	// sent it, not with <, > and & rewritten as \u003c, \u003e, \u0026.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // Encode ends the line
		return err
	}
	_, err := g.env.stdout.Write(b.Bytes())
	return err
}

// printf prints a readable line.
func (g *globals) printf(format string, args ...any) {
	fmt.Fprintf(g.env.stdout, format, args...)
}
