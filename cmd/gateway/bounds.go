package main

import (
	"log/slog"

	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// Wire holds what one WebSocket session (and, for names, keys and headers,
// one HTTP request) may make the gateway hold or do: the session's options
// and the router's bounds. SECURITY.md lists each with what a client sees
// past it.
type Wire struct {
	session.Options
	router.Bounds
}

// bounds returns the router's view of the limits.
func (w Wire) bounds() router.Bounds { return w.Bounds }

// warnFrameLimit logs when --max-frame-bytes was set below what a publish
// of --max-message-bytes in the largest envelope the other limits allow
// needs: such a publish would close its session with 1009 instead of
// being answered.
func warnFrameLimit(log *slog.Logger, cfg config) {
	need := int64(max(cfg.Router.MaxMessageBytes, 0) + router.PublishEnvelopeBytes(cfg.Wire.bounds()))
	if cfg.ReadLimit > 0 && cfg.ReadLimit < need {
		log.Warn("--max-frame-bytes leaves no room for the envelope of the largest publish: a publish near --max-message-bytes closes its session with 1009",
			"max_frame_bytes", cfg.ReadLimit, "needed", need)
	}
}
