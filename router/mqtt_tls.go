package router

// MQTT over TLS on the TCP listener (MQTTOptions.TLS; the gateway passes
// the certificate of --tls-cert, read again when its files change, and
// the client CAs of --tls-client-ca).
//
// The handshake runs first on the connection's goroutine, bounded by
// MQTTOptions.ConnectTimeout like the CONNECT it precedes. A client that
// speaks plain MQTT to the TLS listener fails it at its first bytes (a
// CONNECT is no TLS record): the connection is closed at once, logged
// and counted (switchyard_mqtt_connects_total{result="not_tls"}), so the
// client sees its connection closed rather than a silence. Other failed
// handshakes (an unknown CA at the client, no client certificate under
// mutual TLS) are counted as "tls_handshake_failed" and logged at debug.
//
// A TLS connection offers no wait for its input (its records may hold
// input already read from the socket), so its reader waits in its read:
// an idle TLS session holds the reader goroutine, its 512-byte packet
// reader and what crypto/tls keeps (the last record read), nothing more.

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
)

// mqttHandshake completes the TLS handshake of nc when it is a TLS
// connection, reporting whether the session may go on; a failure is
// logged and counted, and nc is left for the caller to close.
func (rt *Router) mqttHandshake(nc net.Conn) bool {
	tc, ok := nc.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), rt.mq.opts.ConnectTimeout)
	defer cancel()
	err := tc.HandshakeContext(ctx)
	if err == nil {
		return true
	}
	var rh tls.RecordHeaderError
	switch {
	case errors.As(err, &rh):
		rt.mq.m.connects.WithLabelValues("not_tls").Inc()
		rt.log.Warn("mqtt: a client that does not speak TLS connected to the TLS listener (plain MQTT on the MQTTS port?); closed",
			"remote", nc.RemoteAddr().String(), "err", err)
	case ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		rt.mq.m.connects.WithLabelValues("connect_timeout").Inc()
	default:
		rt.mq.m.connects.WithLabelValues("tls_handshake_failed").Inc()
		rt.log.Debug("mqtt: TLS handshake failed", "remote", nc.RemoteAddr().String(), "err", err)
	}
	return false
}
