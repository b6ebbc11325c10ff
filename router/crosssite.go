package router

import (
	"mime"
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/labstack/echo/v4"
)

// Cross-site requests.
//
// A web page on any origin can make a browser send a "simple" request (a
// POST with a text/plain, form or multipart body, no custom headers) to the
// gateway without asking first, and with no keys configured such a request
// would publish, create topics or redrive dead letters. Two rules close
// that:
//
//   - A state-changing request (POST, PUT, PATCH, DELETE) whose Origin is
//     neither the gateway's own host nor one of Options.OriginPatterns is
//     refused with 403 forbidden. Requests without an Origin (curl, the Go
//     client, servers) and same-origin requests (the dashboard) pass.
//   - A POST, and a PUT or PATCH with a body, must say Content-Type:
//     application/json (415 unsupported_media_type otherwise). That type
//     is not "simple", so a browser must send a preflight first, which the
//     gateway answers only for allowed origins.
//
// Allowed origins get CORS answers: preflights (OPTIONS with
// Access-Control-Request-Method) are answered 204 with the methods and
// headers the API uses, and every reply carries Access-Control-Allow-Origin.
// No credentials mode: the API authenticates with the Authorization header,
// never with cookies.

// corsMaxAge is how long (seconds) a browser may cache a preflight answer.
const corsMaxAge = "600"

// crossSite enforces the rules above. It runs before routing and before
// authentication: a preflight carries no credentials.
func (rt *Router) crossSite(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		r := c.Request()
		origin := r.Header.Get("Origin")
		foreign, allowed := false, false
		if origin != "" && !sameOrigin(r, origin) {
			foreign = true
			allowed = originAllowed(rt.settings().origins, origin)
		}
		h := c.Response().Header()
		if origin != "" {
			h.Add("Vary", "Origin")
		}
		if r.Method == http.MethodOptions && origin != "" && r.Header.Get("Access-Control-Request-Method") != "" {
			if foreign && !allowed {
				rt.httpm.refused.WithLabelValues("preflight_origin").Inc()
				return perr(codeForbidden, "origin %q is not allowed", origin)
			}
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, DELETE")
			h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Last-Event-ID")
			h.Set("Access-Control-Max-Age", corsMaxAge)
			return c.NoContent(http.StatusNoContent)
		}
		if allowed {
			h.Set("Access-Control-Allow-Origin", origin)
			h.Set("Access-Control-Expose-Headers", "Retry-After")
		}
		switch r.Method {
		case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
		default:
			return next(c)
		}
		if foreign && !allowed {
			rt.httpm.refused.WithLabelValues("origin").Inc()
			return perr(codeForbidden, "origin %q is not allowed to change state; list it in --allowed-origins", origin)
		}
		hasBody := r.ContentLength != 0 // -1: unknown (chunked), so a body may follow
		if (r.Method == http.MethodPost || hasBody && r.Method != http.MethodDelete) && !isJSON(r.Header.Get("Content-Type")) {
			rt.httpm.refused.WithLabelValues("content_type").Inc()
			return perr(codeUnsupportedMedia, "Content-Type must be application/json")
		}
		return next(c)
	}
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && mt == "application/json"
}

// sameOrigin reports whether origin names the host the request was sent
// to, as a browser on the gateway's own pages (the dashboard) sends it.
func sameOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	return err == nil && u.Host != "" && strings.EqualFold(u.Host, r.Host)
}

// originAllowed matches origin against host patterns the way the WebSocket
// upgrade does: a pattern with "://" is matched against scheme://host,
// others against the host alone, with path.Match syntax, case-insensitive.
func originAllowed(patterns []string, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false // includes "null", sent by sandboxed pages and file: URLs
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		if ok, err := path.Match(strings.ToLower(p), strings.ToLower(target)); err == nil && ok {
			return true
		}
	}
	return false
}
