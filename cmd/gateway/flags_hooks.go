package main

// Settings of the application's authorization hooks
// (router.HookOptions).

import (
	"fmt"

	"github.com/switchyard/switchyard/router"
)

// defaultHooks asks the application about connects and subscribes; a hook
// per publish costs a round trip on the hot path, so it is asked for.
const defaultHooks = "connect,subscribe"

func (c *config) hookFlags(r *registry) {
	r.in(groupHooks)
	h := &c.Router.Hooks
	r.string(&h.URL, "hook-url", "", "base URL of the application's authorization hooks (POST URL/connect, URL/subscribe, URL/publish)")
	r.string(&c.HookNames, "hooks", defaultHooks, "comma-separated hooks to call with --hook-url: connect, subscribe, publish")
	r.duration(&h.Timeout, "hook-timeout", router.DefaultHookTimeout, "bound on each hook call, waiting for a free slot included")
	r.bool(&h.FailOpen, "hook-fail-open", false, "allow subscribes and publishes when their hook fails (default: refuse)")
	r.list(&h.Headers, "hook-headers", nil, "comma-separated request headers sent to the connect hook")
	r.list(&h.Cookies, "hook-cookies", nil, "comma-separated cookie names sent to the connect hook")
	r.int(&h.MaxConcurrent, "hook-max-concurrent", router.DefaultHookMaxConcurrent, "hook requests in flight at most")
	r.int(&h.MaxConcurrentPerIP, "hook-max-concurrent-per-ip", 0, "connect hook requests of one client IP in flight or waiting for a slot at most; past it a connect gets 429 (0: a quarter of --hook-max-concurrent)")
	r.int(&h.CacheEntries, "hook-cache-entries", router.DefaultHookCacheEntries, "cached subscribe hook answers at most")
	r.int(&h.CacheBytes, "hook-cache-bytes", router.DefaultHookCacheBytes, "bytes of cached subscribe hook answers at most")
}

// hookOptions builds the router's authorization hook options: none
// without --hook-url.
func hookOptions(cfg config) (router.HookOptions, error) {
	h := cfg.Router.Hooks
	if h.URL == "" {
		return router.HookOptions{}, nil
	}
	for _, name := range splitList(cfg.HookNames) {
		switch name {
		case "connect":
			h.Connect = true
		case "subscribe":
			h.Subscribe = true
		case "publish":
			h.Publish = true
		default:
			return h, fmt.Errorf("hooks: unknown hook %q (connect, subscribe or publish)", name)
		}
	}
	return h, nil
}
