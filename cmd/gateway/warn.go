package main

// Start-up warnings about a gateway open to the network.
//
// Without any key (no token secret or public key, no JWKS, no admin key)
// the router lets every client do everything, the admin calls included:
// right for a gateway on loopback during development, wrong for one that
// other machines can reach. The gateway still starts, so that trying it
// stays one command, but says so loudly, in one line naming the fix.

import (
	"log/slog"
	"net"

	"github.com/switchyard/switchyard/router"
)

// warnOpen logs a warning when the listener at addr is reachable beyond
// loopback and anyone reaching it may do everything (no keys) or
// publish without a token (anonymous publish grants).
func warnOpen(log *slog.Logger, addr net.Addr, auth router.AuthOptions) {
	if !beyondLoopback(addr) {
		return
	}
	keys := len(auth.HMACSecrets) > 0 || len(auth.PublicKeys) > 0 || len(auth.NamedKeys) > 0 ||
		auth.JWKSURL != "" || auth.JWKSFile != "" || auth.AdminKey != ""
	switch {
	case !keys:
		log.Warn("INSECURE: listening beyond loopback with no keys: anyone who reaches this address may publish, subscribe and call the admin API; "+
			"set --jwt-hmac-secret-file, --jwt-public-key or --jwt-jwks-url and --admin-key-file, or listen on 127.0.0.1",
			"addr", addr.String())
	case auth.Anonymous != nil && len(auth.Anonymous.Publish) > 0:
		log.Warn("INSECURE: listening beyond loopback with anonymous publishing: anyone who reaches this address may publish to "+
			"the --anonymous-publish patterns without a token; clear --anonymous-publish unless that is meant",
			"addr", addr.String(), "patterns", auth.Anonymous.Publish)
	}
}

// beyondLoopback reports whether a listener at addr can be reached from
// other machines: it is bound to all interfaces or to an address other
// than loopback.
func beyondLoopback(addr net.Addr) bool {
	host, _, err := net.SplitHostPort(addr.String())
	if err != nil {
		return true
	}
	ip := net.ParseIP(host)
	return ip == nil || !ip.IsLoopback()
}
