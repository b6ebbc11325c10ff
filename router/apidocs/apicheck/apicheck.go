// Package apicheck validates a test gateway's traffic against the
// gateway's published descriptions (package apidocs): every HTTP response
// against openapi.json with libopenapi-validator, every event of an SSE
// response and every WebSocket frame a test reads against asyncapi.json's
// frame schemas. The router's, the gateway command's and the Go client's
// tests wrap their gateways with it, so that a response the descriptions
// do not allow fails the test that caused it.
//
//	srv := httptest.NewServer(apicheck.New(t).Wrap(rt))
//
// It is for tests only: it imports package testing.
//
// Concurrency: a Checker and the package's functions are safe for
// concurrent use by multiple goroutines; the documents are loaded once
// per process.
package apicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/switchyard/switchyard/router/apidocs"
)

// counts counts what was checked in this process.
var counts struct {
	responses atomic.Int64 // HTTP responses validated against openapi.json
	upgrades  atomic.Int64 // WebSocket upgrades (hijacked; their frames are counted as frames)
	frames    atomic.Int64 // WebSocket frames and SSE events validated against asyncapi.json
}

// Counts returns how many HTTP responses and frames were validated, and how
// many WebSocket upgrades were seen, in this process so far.
func Counts() (responses, frames, upgrades int64) {
	return counts.responses.Load(), counts.frames.Load(), counts.upgrades.Load()
}

// Summary is one line saying what was checked, or "" when nothing was; a
// TestMain prints it after the tests.
func Summary() string {
	r, f, u := Counts()
	if r+f == 0 {
		return ""
	}
	return fmt.Sprintf("api descriptions: %d HTTP responses validated against openapi.json, %d frames against asyncapi.json (%d WebSocket upgrades)", r, f, u)
}

// docs holds the compiled documents, loaded once.
var docs struct {
	once   sync.Once
	err    error
	mu     sync.Mutex // guards http: the validator is not documented as safe for concurrent use
	http   validator.Validator
	client *jsonschema.Schema // asyncapi.json#/components/schemas/ClientFrame
	server *jsonschema.Schema // asyncapi.json#/components/schemas/ServerFrame
}

// Load compiles the documents once, failing t when they do not compile.
func Load(t testing.TB) {
	t.Helper()
	if err := load(); err != nil {
		t.Fatal(err)
	}
}

// load compiles the documents once and returns why they do not compile.
func load() error {
	docs.once.Do(func() {
		doc, err := libopenapi.NewDocument(apidocs.OpenAPI())
		if err != nil {
			docs.err = fmt.Errorf("openapi.json: %w", err)
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			docs.err = fmt.Errorf("openapi.json: %v", errs)
			return
		}
		docs.http = v
		docs.client, docs.server, docs.err = frameSchemas(apidocs.AsyncAPI())
	})
	return docs.err
}

// frameSchemas compiles the frame unions of an AsyncAPI document.
func frameSchemas(asyncAPI []byte) (client, server *jsonschema.Schema, err error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(asyncAPI))
	if err != nil {
		return nil, nil, fmt.Errorf("asyncapi.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7) // AsyncAPI's schema format is a superset of draft 7
	const url = "file:///asyncapi.json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, nil, err
	}
	if client, err = c.Compile(url + "#/components/schemas/ClientFrame"); err != nil {
		return nil, nil, err
	}
	if server, err = c.Compile(url + "#/components/schemas/ServerFrame"); err != nil {
		return nil, nil, err
	}
	return client, server, nil
}

// validate checks one JSON frame against sch.
func validate(sch *jsonschema.Schema, frame []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(frame))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return nil
}

// ClientFrame validates a frame a client sends, without counting it. Load
// must have been called.
func ClientFrame(frame []byte) error { return validate(docs.client, frame) }

// ServerFrame validates a frame the gateway sent (one JSON object) and
// counts it. Load must have been called.
func ServerFrame(frame []byte) error {
	counts.frames.Add(1)
	if err := validate(docs.server, frame); err != nil {
		return fmt.Errorf("frame %.300s does not match asyncapi.json: %v", frame, err)
	}
	return nil
}

// ServerFrameUncounted validates a gateway frame without counting it: for
// tests of the schemas themselves.
func ServerFrameUncounted(frame []byte) error { return validate(docs.server, frame) }

// ServerFrames validates every line of a WebSocket text frame (the gateway
// may batch objects separated by "\n").
func ServerFrames(frame []byte) error {
	for _, line := range bytes.Split(frame, []byte("\n")) {
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := ServerFrame(line); err != nil {
			return err
		}
	}
	return nil
}

// Checker validates the responses of one test gateway; the test fails at
// its end for every mismatch.
type Checker struct {
	mu   sync.Mutex // guards errs
	errs []string
}

// New returns the checker of t's gateway. Its cleanup is registered first,
// so call it before starting the server: the cleanup then runs after the
// server has closed and every handler has returned.
func New(t testing.TB) *Checker {
	Load(t)
	a := &Checker{}
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, e := range a.errs {
			t.Errorf("API description mismatch: %s", e)
		}
	})
	return a
}

// Detached returns a checker tied to no test, for gateways a test
// package starts without a testing.TB (examples, TestMain): its mismatches
// are read with Errors, typically after the tests have run.
func Detached() (*Checker, error) {
	if err := load(); err != nil {
		return nil, err
	}
	return &Checker{}, nil
}

// Errors returns the mismatches found so far.
func (a *Checker) Errors() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.errs...)
}

func (a *Checker) fail(format string, args ...any) {
	a.mu.Lock()
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
	a.mu.Unlock()
}

// Fail records a mismatch found elsewhere (for example in a frame a test
// client read), reported when the test ends.
func (a *Checker) Fail(err error) { a.fail("%v", err) }

// MaxCheckedBody bounds the bytes of one response kept for validation; an
// event stream is validated up to its last event within it.
const MaxCheckedBody = 8 << 20

// Wrap returns h with every response validated.
func (a *Checker) Wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recordingWriter{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.hijacked {
			counts.upgrades.Add(1)
			return
		}
		a.check(r, rec)
	})
}

func (a *Checker) check(r *http.Request, rec *recordingWriter) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	a.checkResponse(r, status, rec.Header(), rec.body.Bytes())
}

// checkResponse validates one response to r: its status, headers and body.
func (a *Checker) checkResponse(r *http.Request, status int, header http.Header, body []byte) {
	where := r.Method + " " + r.URL.RequestURI()
	if r.Method == http.MethodOptions {
		return // a CORS preflight, answered for any path before routing
	}
	req := r.Clone(r.Context())
	req.Body = http.NoBody
	resp := &http.Response{StatusCode: status, Header: header.Clone(), Request: req,
		Body: io.NopCloser(bytes.NewReader(body))}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The body is validated as events below; OpenAPI checks the status
		// and media type.
		resp.Body = io.NopCloser(strings.NewReader(""))
		a.checkEvents(where, body)
	}
	counts.responses.Add(1)
	docs.mu.Lock()
	ok, errs := docs.http.ValidateHttpResponse(req, resp)
	docs.mu.Unlock()
	if ok {
		return
	}
	if len(errs) > 0 && errs[0].ValidationType == "path" && (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) {
		// No such route: the documented JSON error of an unknown path.
		a.checkUnrouted(where, status, body)
		return
	}
	for _, e := range errs {
		msg := e.Message + ": " + e.Reason
		for _, s := range e.SchemaValidationErrors {
			msg += fmt.Sprintf("; %s at %s", s.Reason, s.FieldPath)
		}
		a.fail("%s → %d %.300s: %s", where, status, body, msg)
	}
}

// checkUnrouted checks the reply to a path the API does not have: an Error.
func (a *Checker) checkUnrouted(where string, status int, body []byte) {
	var e struct{ Code, Message string }
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || (e.Code != "not_found" && e.Code != "method_not_allowed") || e.Message == "" {
		a.fail("%s → %d %.300s: an unknown path must answer the Error object (not_found or method_not_allowed)", where, status, body)
	}
}

// checkEvents validates the data of every complete event of an SSE body.
func (a *Checker) checkEvents(where string, body []byte) {
	if i := bytes.LastIndex(body, []byte("\n\n")); i >= 0 {
		body = body[:i]
	} else {
		return
	}
	for _, ev := range bytes.Split(body, []byte("\n\n")) {
		for _, line := range bytes.Split(ev, []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				if err := ServerFrame(data); err != nil {
					a.fail("%s: SSE event: %v", where, err)
				}
			}
		}
	}
}
