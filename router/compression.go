package router

// WebSocket compression: permessage-deflate (RFC 7692) when
// Options.Compression allows it and the client offers it, always without
// context takeover. With context takeover each session would keep a 32 KiB
// window and a compressor for its lifetime, which with tens of thousands
// of mostly idle sessions would dominate the gateway's memory; without it a
// frame is compressed with a pooled compressor and inflated with a pooled
// reader, and the session holds nothing between frames. Inbound frames are
// limited after inflating (Options.Session.ReadLimit), so a small
// compressed frame that inflates past the limit closes the session with
// 1009 like any frame that is too large.

import "github.com/coder/websocket"

// acceptOptions are the WebSocket handshake options of every session.
func (rt *Router) acceptOptions() *websocket.AcceptOptions {
	o := &websocket.AcceptOptions{OriginPatterns: rt.settings().origins}
	if rt.opts.Compression {
		o.CompressionMode = websocket.CompressionNoContextTakeover
		o.CompressionThreshold = rt.opts.CompressionThreshold
	}
	return o
}
