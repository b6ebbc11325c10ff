package router_test

// Validation of everything the router's tests see against the gateway's
// published descriptions (router/apidocs): every HTTP response a test
// gateway (newGateway) sends is checked against openapi.json with
// libopenapi-validator, every event of an SSE response and every frame
// the WebSocket test client reads against asyncapi.json's ServerFrame
// schema. A mismatch fails the test that caused it; TestMain prints how
// many were checked.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// apiCounts counts what the hooks checked in this test binary.
var apiCounts struct {
	responses atomic.Int64 // HTTP responses validated against openapi.json
	upgrades  atomic.Int64 // WebSocket upgrades (hijacked; their frames are counted as frames)
	frames    atomic.Int64 // WebSocket frames and SSE events validated against asyncapi.json
}

// printAPICounts reports the counts; TestMain calls it after the tests.
func printAPICounts() {
	if apiCounts.responses.Load()+apiCounts.frames.Load() == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "api descriptions: %d HTTP responses validated against openapi.json, %d frames against asyncapi.json (%d WebSocket upgrades)\n",
		apiCounts.responses.Load(), apiCounts.frames.Load(), apiCounts.upgrades.Load())
}

// apiDocs holds the documents, loaded once.
var apiDocs struct {
	once   sync.Once
	err    error
	mu     sync.Mutex // guards http: the validator is not documented as safe for concurrent use
	http   validator.Validator
	client *jsonschema.Schema // asyncapi.json#/components/schemas/ClientFrame
	server *jsonschema.Schema // asyncapi.json#/components/schemas/ServerFrame
}

func loadAPIDocs(t testing.TB) {
	t.Helper()
	apiDocs.once.Do(func() {
		spec, err := os.ReadFile("apidocs/openapi.json")
		if err != nil {
			apiDocs.err = err
			return
		}
		doc, err := libopenapi.NewDocument(spec)
		if err != nil {
			apiDocs.err = fmt.Errorf("openapi.json: %w", err)
			return
		}
		v, errs := validator.NewValidator(doc)
		if len(errs) > 0 {
			apiDocs.err = fmt.Errorf("openapi.json: %v", errs)
			return
		}
		apiDocs.http = v
		apiDocs.client, apiDocs.server, apiDocs.err = frameSchemas("apidocs/asyncapi.json")
	})
	if apiDocs.err != nil {
		t.Fatal(apiDocs.err)
	}
}

// frameSchemas compiles the frame unions of the AsyncAPI document at path.
func frameSchemas(path string) (client, server *jsonschema.Schema, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
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

// checkFrame validates one JSON frame against sch.
func checkFrame(sch *jsonschema.Schema, frame []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(frame))
	if err != nil {
		return fmt.Errorf("not JSON: %v", err)
	}
	if err := sch.Validate(v); err != nil {
		return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	return nil
}

// checkServerFrame validates a frame the gateway sent and counts it.
func checkServerFrame(frame []byte) error {
	apiCounts.frames.Add(1)
	if err := checkFrame(apiDocs.server, frame); err != nil {
		return fmt.Errorf("frame %.300s does not match asyncapi.json: %v", frame, err)
	}
	return nil
}

// apiCheck validates the responses of one test gateway; the test fails
// at its end for every mismatch.
type apiCheck struct {
	mu   sync.Mutex // guards errs
	errs []string
}

// newAPICheck returns the checker of t's gateway. Its cleanup is
// registered first, so it runs after the gateway's server has closed and
// every handler has returned.
func newAPICheck(t *testing.T) *apiCheck {
	loadAPIDocs(t)
	a := &apiCheck{}
	t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		for _, e := range a.errs {
			t.Errorf("API description mismatch: %s", e)
		}
	})
	return a
}

func (a *apiCheck) fail(format string, args ...any) {
	a.mu.Lock()
	a.errs = append(a.errs, fmt.Sprintf(format, args...))
	a.mu.Unlock()
}

// maxCheckedBody bounds the bytes of one response kept for validation; an
// event stream is validated up to its last event within it.
const maxCheckedBody = 8 << 20

// wrap returns h with every response validated.
func (a *apiCheck) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recordingWriter{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if rec.hijacked {
			apiCounts.upgrades.Add(1)
			return
		}
		a.check(r, rec)
	})
}

func (a *apiCheck) check(r *http.Request, rec *recordingWriter) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	where := r.Method + " " + r.URL.RequestURI()
	if r.Method == http.MethodOptions {
		return // a CORS preflight, answered for any path before routing
	}
	req := r.Clone(r.Context())
	req.Body = http.NoBody
	resp := &http.Response{StatusCode: status, Header: rec.Header().Clone(), Request: req,
		Body: io.NopCloser(bytes.NewReader(rec.body.Bytes()))}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		// The body is validated as events below; OpenAPI checks the status
		// and media type.
		resp.Body = io.NopCloser(strings.NewReader(""))
		a.checkEvents(where, rec.body.Bytes())
	}
	apiCounts.responses.Add(1)
	apiDocs.mu.Lock()
	ok, errs := apiDocs.http.ValidateHttpResponse(req, resp)
	apiDocs.mu.Unlock()
	if ok {
		return
	}
	if len(errs) > 0 && errs[0].ValidationType == "path" && (status == http.StatusNotFound || status == http.StatusMethodNotAllowed) {
		// No such route: the documented JSON error of an unknown path.
		a.checkUnrouted(where, status, rec)
		return
	}
	for _, e := range errs {
		msg := e.Message + ": " + e.Reason
		for _, s := range e.SchemaValidationErrors {
			msg += fmt.Sprintf("; %s at %s", s.Reason, s.FieldPath)
		}
		a.fail("%s → %d %.300s: %s", where, status, rec.body.Bytes(), msg)
	}
}

// checkUnrouted checks the reply to a path the API does not have: an Error.
func (a *apiCheck) checkUnrouted(where string, status int, rec *recordingWriter) {
	var e struct{ Code, Message string }
	dec := json.NewDecoder(bytes.NewReader(rec.body.Bytes()))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil || (e.Code != "not_found" && e.Code != "method_not_allowed") || e.Message == "" {
		a.fail("%s → %d %.300s: an unknown path must answer the Error object (not_found or method_not_allowed)", where, status, rec.body.Bytes())
	}
}

// checkEvents validates the data of every complete event of an SSE body.
func (a *apiCheck) checkEvents(where string, body []byte) {
	if i := bytes.LastIndex(body, []byte("\n\n")); i >= 0 {
		body = body[:i]
	} else {
		return
	}
	for _, ev := range bytes.Split(body, []byte("\n\n")) {
		for _, line := range bytes.Split(ev, []byte("\n")) {
			if data, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				if err := checkServerFrame(data); err != nil {
					a.fail("%s: SSE event: %v", where, err)
				}
			}
		}
	}
}

// recordingWriter keeps a copy of what a handler writes. It passes
// Flush, Hijack and (through Unwrap) the deadlines of
// http.ResponseController on to the server's writer.
type recordingWriter struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	hijacked bool
}

func (w *recordingWriter) WriteHeader(code int) {
	if w.status == 0 && code >= 200 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	if w.body.Len()+len(b) <= maxCheckedBody {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recordingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *recordingWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	w.hijacked = true
	return http.NewResponseController(w.ResponseWriter).Hijack()
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
