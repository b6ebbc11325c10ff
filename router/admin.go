package router

// Administration calls that act on the gateway itself.
//
// POST /v1/admin/reload (admin) loads the gateway's settings again and
// applies what can change live (Options.Reloader, which ends in Reload,
// reload.go): 200 {"reloaded":[…],"unchanged":[…]} naming the settings,
// or 400 bad_request whose message says why the reload was refused (a
// file that does not load, a setting that needs a restart, keys or hooks
// that do not check); a refused reload changes nothing. Without a
// Reloader (an embedded Router) the call is 404 not_found.
//
// Concurrency: the handler only calls the Reloader, which serializes
// reloads.

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"
)

// ReloadReport says what a reload changed: the names of the settings
// reloaded and of those unchanged (the reply of POST /v1/admin/reload).
type ReloadReport struct {
	Reloaded  []string `json:"reloaded"`
	Unchanged []string `json:"unchanged"`
}

// adminRoutes registers the handlers of this file.
func (rt *Router) adminRoutes(e *echo.Echo, admin echo.MiddlewareFunc) {
	e.POST("/v1/admin/reload", rt.httpReload, admin)
}

func (rt *Router) httpReload(c echo.Context) error {
	reload := rt.opts.Reloader
	if reload == nil {
		return perr(codeNotFound, "this gateway has no settings to reload (it runs embedded, without a config)")
	}
	rep, err := reload(c.Request().Context())
	if err != nil {
		return perr(codeBadRequest, "%s", err.Error())
	}
	if rep.Reloaded == nil {
		rep.Reloaded = []string{}
	}
	if rep.Unchanged == nil {
		rep.Unchanged = []string{}
	}
	return c.JSON(http.StatusOK, rep)
}

// A Reloader loads the gateway's settings again and applies them (through
// Router.Reload), reporting what changed, or why nothing did.
type Reloader func(ctx context.Context) (ReloadReport, error)
