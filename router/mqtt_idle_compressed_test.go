//go:build linux

package router_test

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTParkedCompressedMessageHandledWhole: over GET /mqtt with
// permessage-deflate, a client's one message carrying many packets is
// handled whole: every PINGREQ in it is answered. The packet reader takes
// 512 bytes of the decompressed message at a time; what the inflater
// still holds is neither in the socket nor in the connection's buffers,
// so the reader must not park (or wait for the socket) while it is there.
func TestMQTTParkedCompressedMessageHandledWhole(t *testing.T) {
	const pings = 600 // 1200 bytes: more than two of the reader's 512
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.Compression = true })
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(g.srv.URL, "http")+"/mqtt",
		&websocket.DialOptions{Subprotocols: []string{"mqtt"}, CompressionMode: websocket.CompressionNoContextTakeover})
	if err != nil {
		t.Fatal(err)
	}
	nc := websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
	t.Cleanup(func() { nc.Close() })
	r := &rawMQTT{nc: nc, br: bufio.NewReader(nc), v: 5}
	id := "deflate-pings"
	r.connect(t, id, 30)
	waitUntil(t, "the idle session to park", mqttParked(g, id))

	var b bytes.Buffer
	for range pings {
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}, ProtocolVersion: 5}
		if err := pk.PingreqEncode(&b); err != nil {
			t.Fatal(err)
		}
	}
	r.write(t, b.Bytes()) // one message, compressed
	for i := range pings {
		pk, err := r.read(t)
		if err != nil {
			t.Fatalf("%d of %d PINGREQs of one compressed message answered, then: %v", i, pings, err)
		}
		if pk.FixedHeader.Type != packets.Pingresp {
			t.Fatalf("got %s, want PINGRESP", packets.PacketNames[pk.FixedHeader.Type])
		}
	}
}
