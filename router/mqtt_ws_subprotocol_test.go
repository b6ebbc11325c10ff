package router_test

// GET /mqtt's subprotocols, over a hand-made WebSocket upgrade: what an
// MQTT 3.1 client sends on the wire.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestMQTTWebSocketSubprotocolV31: an upgrade offering only "mqttv3.1" is
// answered with "mqttv3.1", and a CONNECT at protocol level 3 sent in a
// binary message gets its CONNACK (return code 0); one offering both gets
// "mqtt"; one offering neither is refused with 400 naming both.
func TestMQTTWebSocketSubprotocolV31(t *testing.T) {
	g := newGateway(t, withMQTT)
	addr := strings.TrimPrefix(g.srv.URL, "http://")

	upgrade := func(t *testing.T, offer string) (net.Conn, *bufio.Reader, *http.Response) {
		t.Helper()
		nc, err := net.DialTimeout("tcp", addr, waitTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { nc.Close() })
		_ = nc.SetDeadline(time.Now().Add(waitTimeout))
		req := "GET /mqtt HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
		if offer != "" {
			req += "Sec-WebSocket-Protocol: " + offer + "\r\n"
		}
		if _, err := io.WriteString(nc, req+"\r\n"); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(nc)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		return nc, br, resp
	}

	t.Run("only mqttv3.1", func(t *testing.T) {
		nc, br, resp := upgrade(t, "mqttv3.1")
		if resp.StatusCode != http.StatusSwitchingProtocols {
			t.Fatalf("upgrade: %s", resp.Status)
		}
		if p := resp.Header.Get("Sec-WebSocket-Protocol"); p != "mqttv3.1" {
			t.Fatalf("Sec-WebSocket-Protocol %q, want mqttv3.1", p)
		}
		var b bytes.Buffer
		pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 3,
			Connect: packets.ConnectParams{ProtocolName: []byte("MQIsdp"), ClientIdentifier: "ws-v31", Clean: true, Keepalive: 30}}
		if err := pk.ConnectEncode(&b); err != nil {
			t.Fatal(err)
		}
		// One masked binary message (RFC 6455 5.2), the client's.
		body := b.Bytes()
		mask := [4]byte{1, 2, 3, 4}
		frame := append([]byte{0x82, 0x80 | byte(len(body))}, mask[:]...)
		for i, c := range body {
			frame = append(frame, c^mask[i%4])
		}
		if _, err := nc.Write(frame); err != nil {
			t.Fatal(err)
		}
		// The CONNACK: one unmasked binary message of 4 bytes.
		got := make([]byte, 6)
		if _, err := io.ReadFull(br, got); err != nil {
			t.Fatal(err)
		}
		if want := []byte{0x82, 4, packets.Connack << 4, 2, 0, 0}; !bytes.Equal(got, want) {
			t.Fatalf("got % x, want % x (a binary message holding CONNACK 0)", got, want)
		}
	})

	t.Run("both", func(t *testing.T) {
		_, _, resp := upgrade(t, "mqttv3.1, mqtt")
		if p := resp.Header.Get("Sec-WebSocket-Protocol"); resp.StatusCode != http.StatusSwitchingProtocols || p != "mqtt" {
			t.Fatalf("upgrade %s with subprotocol %q, want 101 with mqtt", resp.Status, p)
		}
	})

	t.Run("neither", func(t *testing.T) {
		_, _, resp := upgrade(t, "chat")
		defer resp.Body.Close()
		msg, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(msg), "mqttv3.1") {
			t.Fatalf("upgrade offering chat: %s %s, want 400 naming mqttv3.1", resp.Status, msg)
		}
	})
}
