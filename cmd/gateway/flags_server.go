package main

// Settings of the server: the listener, HTTP timeouts, browsers, the
// WebSocket transport and shutdown.

import (
	"errors"
	"time"

	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// Defaults of the gateway's own server settings.
const (
	defaultAddr = ":8080"
	// defaultShutdownTimeout leaves sessions half of it to flush
	// (router.Options.ShutdownGrace) and the engine the rest.
	defaultShutdownTimeout = 10 * time.Second
)

func (c *config) serverFlags(r *registry) {
	r.in(groupServer)
	r.string(&c.ConfigFile, "config", "", "YAML file of settings (keys are the flag names)")
	r.string(&c.Addr, "addr", defaultAddr, "listen address for WebSocket, HTTP API, metrics and dashboard")
	r.list(&c.Router.OriginPatterns, "allowed-origins", nil, "comma-separated extra browser origins (host patterns) allowed to open WebSockets and to POST/PUT/DELETE over HTTP (CORS answered for them)")
	r.cidrs(&c.Router.TrustedProxies, "trusted-proxies", nil, "comma-separated CIDRs of reverse proxies whose X-Forwarded-For names the client IP")
	r.duration(&c.HTTP.ReadHeaderTimeout, "handshake-timeout", router.DefaultReadHeaderTimeout, "time a client has to send its HTTP request headers (and so the WebSocket handshake)")
	r.duration(&c.HTTP.ReadTimeout, "read-timeout", router.DefaultReadTimeout, "time a client has to send a whole HTTP request, headers and body (not WebSocket sessions once upgraded)")
	r.duration(&c.HTTP.WriteTimeout, "write-timeout", router.DefaultWriteTimeout, "time an HTTP response may take to write once its request is read (polls get wait_ms on top; not WebSocket sessions)")
	r.duration(&c.HTTP.IdleTimeout, "idle-timeout", router.DefaultIdleTimeout, "how long a keep-alive HTTP connection may wait for its next request")
	r.duration(&c.ShutdownTimeout, "shutdown-timeout", defaultShutdownTimeout, "bound on graceful shutdown")
	r.duration(&c.PingInterval, "ping-interval", session.DefaultPingInterval, "WebSocket keepalive ping period")
	r.onOff(&c.Router.Compression, "compression", false, `WebSocket permessage-deflate, "off" or "on" (no context takeover; frames of 512 bytes and more): off by default since it costs CPU per subscriber and frame, which pays only when clients are short of bandwidth and payloads are large`)
	r.duration(&c.WriteDelay, "write-delay", 0, "write coalescing: how long a session's writer waits for more frames before a write (0: off, write at once); replies are never held")
	r.int(&c.WriteDelayFrames, "write-delay-frames", session.DefaultWriteDelayFrames, "with --write-delay: most frames per write, and the queued frames at which the writer stops waiting")
	// Bound to Options.NoIdlePark, whose zero value (false) is "on".
	bind(r, &c.NoIdlePark, "idle-park", false, `idle sessions' sockets (WebSocket, and MQTT over TCP or WebSocket) wait in one epoll set of the process instead of a goroutine each, "on" or "off" (on: where epoll exists, Linux; off: each idle session keeps a reader goroutine)`, kind{"off|on", `"off" or "on"`},
		func(s string) (bool, error) {
			switch s {
			case "on":
				return false, nil
			case "off":
				return true, nil
			}
			return false, errors.New("neither off nor on")
		},
		func(off bool) string {
			if off {
				return "off"
			}
			return "on"
		})
	r.action(&c.Version, "version", "print the version and exit")
	r.action(&c.CheckConfig, "check-config", "load and check the settings (file, environment, flags; key and certificate files read), print the errors and exit: 0 when they would start")
	r.action(&c.PrintConfig, "print-config", "print the effective settings as a YAML file for --config, each with where it came from (flag, env, file, default), secrets hidden, and exit")
}
