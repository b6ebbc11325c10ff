package apicheck

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestHTTPValidationCatchesMismatch runs responses that break the
// OpenAPI document through the test gateways' hook and checks that each
// is reported: the validation can fail.
func TestHTTPValidationCatchesMismatch(t *testing.T) {
	Load(t)
	for _, tc := range mismatches {
		t.Run(tc.name, func(t *testing.T) {
			a := &Checker{}
			h := a.Wrap(tc.handler())
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tc.path, nil))
			if len(a.errs) == 0 {
				t.Fatalf("GET %s answering %s was not reported", tc.path, tc.body)
			}
			t.Log(a.errs[0])
		})
	}
}

// TestTransportCatchesMismatch sends the same responses to a client
// whose Transport checks them, and checks that each is reported once the
// body is read and closed, and that a host the filter leaves out is not
// checked.
func TestTransportCatchesMismatch(t *testing.T) {
	Load(t)
	for _, tc := range mismatches {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler())
			defer srv.Close()
			var hosts Hosts
			a := &Checker{}
			c := &http.Client{Transport: a.Transport(http.DefaultTransport, hosts.Has)}
			get := func() {
				resp, err := c.Get(srv.URL + tc.path)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				if string(b) != tc.body {
					t.Fatalf("body %q, want %q: the check changed what the client reads", b, tc.body)
				}
			}
			get()
			if errs := a.Errors(); len(errs) != 0 {
				t.Fatalf("a host not added was checked: %v", errs)
			}
			hosts.Add(srv.Listener.Addr().String())
			get()
			if len(a.Errors()) == 0 {
				t.Fatalf("GET %s answering %s was not reported", tc.path, tc.body)
			}
			t.Log(a.Errors()[0])
		})
	}
}

// mismatch is a response that breaks the OpenAPI document.
type mismatch struct {
	name, path  string
	status      int
	ctype, body string
}

func (tc mismatch) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", tc.ctype)
		w.WriteHeader(tc.status)
		_, _ = io.WriteString(w, tc.body)
	})
}

var mismatches = []mismatch{
	{"field of the wrong type", "/v1/info", 200, "application/json", `{"version":1,"engine":"m","epoch":"e","node":"n"}`},
	{"missing field", "/v1/info", 200, "application/json", `{"version":"1","engine":"m","epoch":"e"}`},
	{"undocumented error code", "/v1/topics/x", 404, "application/json", `{"code":"nope","message":"m"}`},
	{"undocumented media type", "/healthz", 200, "text/plain", `ok`},
	{"unknown path without the Error object", "/v1/nope/nope", 404, "text/plain", `404 page not found`},
	{"SSE event that is not a frame", "/v1/sse?pattern=a", 200, "text/event-stream", "retry: 1000\n\nevent: welcome\ndata: {\"op\":\"welcome\"}\n\n"},
}
