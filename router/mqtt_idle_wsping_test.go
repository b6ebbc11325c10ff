//go:build linux

package router_test

import (
	"bufio"
	"context"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// TestMQTTParksAgainAfterWebSocketPing: an idle MQTT session over GET
// /mqtt whose client sends a WebSocket ping (as keepalive of the
// WebSocket layer, which some clients and proxies do) answers it and
// parks again: a control frame is no packet, and the session is as idle
// as before. The resumed reader instead waits inside the WebSocket
// library for the next message, holding its goroutine and packet reader.
func TestMQTTParksAgainAfterWebSocketPing(t *testing.T) {
	g := newGateway(t, withMQTT)
	id := "ws-ping"
	ws, _ := parkedMQTTOverWS(t, g, id, 30)
	ws.CloseRead(context.Background()) // reads the pong
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := ws.Ping(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	waitUntil(t, "the session to park again after a WebSocket ping", mqttParked(g, id))
}

// parkedMQTTOverWS connects an MQTT 5 session with client id id and keep
// alive keepAlive (seconds) over GET /mqtt and waits until it parks.
func parkedMQTTOverWS(t *testing.T, g *gateway, id string, keepAlive uint16) (*websocket.Conn, *rawMQTT) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.srv.URL, "http")+"/mqtt",
		&websocket.DialOptions{Subprotocols: []string{"mqtt"}})
	if err != nil {
		t.Fatal(err)
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	t.Cleanup(func() { nc.Close() })
	r := &rawMQTT{nc: nc, br: bufio.NewReader(nc), v: 5}
	r.connect(t, id, keepAlive)
	waitUntil(t, "the idle session to park", mqttParked(g, id))
	return ws, r
}
