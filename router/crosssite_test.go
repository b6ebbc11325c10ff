package router_test

import (
	"net/http"
	"testing"
)

// TestCrossSiteRequests: a page on a foreign origin cannot change state
// with a "simple" request (no preflight), and origins listed in
// OriginPatterns get proper CORS answers.
func TestCrossSiteRequests(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.OriginPatterns = []string{"app.example.com"} })
	publish := `{"topic":"cs.t","data":1}`
	for _, tt := range []struct {
		name        string
		method      string
		path        string
		origin      string
		contentType string
		want        int
		code        string
	}{
		{"foreign simple text/plain publish", "POST", "/v1/publish", "https://evil.example", "text/plain", 403, "forbidden"},
		{"foreign JSON publish", "POST", "/v1/publish", "https://evil.example", "application/json", 403, "forbidden"},
		{"foreign form create", "POST", "/v1/topics", "https://evil.example", "application/x-www-form-urlencoded", 403, "forbidden"},
		{"foreign delete", "DELETE", "/v1/topics/cs.t", "https://evil.example", "", 403, "forbidden"},
		{"null origin publish", "POST", "/v1/publish", "null", "application/json", 403, "forbidden"},
		{"no origin text/plain publish", "POST", "/v1/publish", "", "text/plain", 415, "unsupported_media_type"},
		{"no origin missing content type", "POST", "/v1/publish", "", "", 415, "unsupported_media_type"},
		{"no origin JSON publish", "POST", "/v1/publish", "", "application/json", 200, ""},
		{"no origin JSON with charset", "POST", "/v1/publish", "", "application/json; charset=utf-8", 200, ""},
		{"same origin JSON publish", "POST", "/v1/publish", "SELF", "application/json", 200, ""},
		{"same origin text/plain publish", "POST", "/v1/publish", "SELF", "text/plain", 415, "unsupported_media_type"},
		{"allowed origin JSON publish", "POST", "/v1/publish", "https://app.example.com", "application/json", 200, ""},
		{"foreign read", "GET", "/v1/topics", "https://evil.example", "", 200, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			if tt.origin == "SELF" {
				h.Set("Origin", g.srv.URL)
			} else if tt.origin != "" {
				h.Set("Origin", tt.origin)
			}
			h["Content-Type"] = nil
			if tt.contentType != "" {
				h.Set("Content-Type", tt.contentType)
			}
			var body any
			if tt.method == "POST" {
				body = publish
				if tt.path == "/v1/topics" {
					body = "name=cs.t"
				}
			}
			st, m, hdr := g.httpDoHeader(t, tt.method, tt.path, h, body)
			if st != tt.want || (tt.code != "" && m["code"] != tt.code) {
				t.Fatalf("%d %v, want %d %s", st, m, tt.want, tt.code)
			}
			if tt.origin == "https://app.example.com" && hdr.Get("Access-Control-Allow-Origin") != tt.origin {
				t.Fatalf("Access-Control-Allow-Origin = %q", hdr.Get("Access-Control-Allow-Origin"))
			}
			if tt.origin == "https://evil.example" && hdr.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("foreign origin got Access-Control-Allow-Origin %q", hdr.Get("Access-Control-Allow-Origin"))
			}
		})
	}

	t.Run("preflight", func(t *testing.T) {
		for _, tt := range []struct {
			origin string
			want   int
		}{
			{"https://app.example.com", 204},
			{"https://evil.example", 403},
		} {
			req, _ := http.NewRequest("OPTIONS", g.srv.URL+"/v1/publish", nil)
			req.Header.Set("Origin", tt.origin)
			req.Header.Set("Access-Control-Request-Method", "POST")
			req.Header.Set("Access-Control-Request-Headers", "content-type, authorization")
			resp, err := g.srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.want {
				t.Fatalf("%s: preflight %d, want %d", tt.origin, resp.StatusCode, tt.want)
			}
			if tt.want == 204 {
				if resp.Header.Get("Access-Control-Allow-Origin") != tt.origin ||
					resp.Header.Get("Access-Control-Allow-Methods") == "" ||
					resp.Header.Get("Access-Control-Allow-Headers") == "" {
					t.Fatalf("%s: preflight headers %v", tt.origin, resp.Header)
				}
			} else if resp.Header.Get("Access-Control-Allow-Origin") != "" {
				t.Fatalf("%s: foreign preflight allowed: %v", tt.origin, resp.Header)
			}
		}
	})
	if n := metricValue(t, g.reg, "switchyard_http_refused_total", map[string]string{"reason": "origin"}); n < 4 {
		t.Fatalf("origin refusals counted: %v", n)
	}
}
