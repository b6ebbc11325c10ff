// Package web holds the files the Switchyard gateway serves to browsers: the
// live dashboard (index.html, dashboard.js, dashboard_ui.js,
// dashboard_api.js, dashboard_panels.js, dashboard.css, eventstream.js), a minimal example page (example.html) and the JavaScript
// client library (switchyard.js, the entry, with client_base.js,
// client_frames.js and its SSE transport in sse_transport.js, which reads a
// stream that carries a token with eventstream.js).
//
// The files are plain ES modules and stylesheets embedded into the binary;
// there is no build step and nothing is fetched from elsewhere. The gateway
// mounts FS at "/" and also serves switchyard.js at "/switchyard.js", so a
// page on the gateway's origin can write
//
//	import { connect } from "/switchyard.js";
//
// The same switchyard.js is the entry of the npm package @switchyard/client
// (web/package.json, with TypeScript declarations in web/switchyard.d.ts),
// so the served client and the installed one are one file.
//
// See web/README.md for the client API and what the dashboard shows.
//
// # Concurrency
//
// FS returns a read-only file system that is safe for concurrent use by
// multiple goroutines.
package web

import (
	"embed"
	"io/fs"
)

//go:embed static
var static embed.FS

// FS returns the served files, rooted at the static directory: "index.html",
// "dashboard.js", "dashboard_ui.js", "dashboard.css", "eventstream.js",
// "example.html" and "switchyard.js".
func FS() fs.FS {
	sub, err := fs.Sub(static, "static")
	if err != nil {
		// fs.Sub fails only for an invalid directory name; "static" is valid.
		panic("web: " + err.Error())
	}
	return sub
}
