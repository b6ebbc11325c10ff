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
	for _, tc := range []struct {
		name, path  string
		status      int
		ctype, body string
	}{
		{"field of the wrong type", "/v1/info", 200, "application/json", `{"version":1,"engine":"m","epoch":"e","node":"n"}`},
		{"missing field", "/v1/info", 200, "application/json", `{"version":"1","engine":"m","epoch":"e"}`},
		{"undocumented error code", "/v1/topics/x", 404, "application/json", `{"code":"nope","message":"m"}`},
		{"undocumented media type", "/healthz", 200, "text/plain", `ok`},
		{"unknown path without the Error object", "/v1/nope/nope", 404, "text/plain", `404 page not found`},
		{"SSE event that is not a frame", "/v1/sse?pattern=a", 200, "text/event-stream", "retry: 1000\n\nevent: welcome\ndata: {\"op\":\"welcome\"}\n\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &Checker{}
			h := a.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ctype)
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, tc.path, nil))
			if len(a.errs) == 0 {
				t.Fatalf("GET %s answering %s was not reported", tc.path, tc.body)
			}
			t.Log(a.errs[0])
		})
	}
}
