//go:build linux

package router_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// TestMQTTKeepAliveNotKeptByWebSocketPings: an MQTT session over GET
// /mqtt whose client sends WebSocket pings only (no MQTT control packet)
// is ended at 1.5 times its keep alive: MQTT's keep alive counts MQTT
// control packets (MQTT 5, 3.1.2.10: "the maximum time interval ...
// between the point at which the Client finishes transmitting one MQTT
// Control Packet and the point it starts sending the next"), and
// docs/mqtt.md ends "a session that sends nothing for 1.5 times its keep
// alive". A WebSocket ping is a frame of the transport below, answered
// by the gateway, and no packet.
func TestMQTTKeepAliveNotKeptByWebSocketPings(t *testing.T) {
	g := newGateway(t, withMQTT)
	id := "ws-ping-keepalive"
	ws, r := parkedMQTTOverWS(t, g, id, 1) // ended after 1.5 s without a packet

	// The pings: every 200 ms, each answered (the reader below reads the
	// pongs), until the test ends.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			pctx, pcancel := context.WithTimeout(context.Background(), 2*time.Second)
			err := ws.Ping(pctx)
			pcancel()
			if err != nil {
				return // the connection ended
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)

	// 4 times the 1.5 s bound: the DISCONNECT 0x8D must have come.
	const bound = 6 * time.Second
	start := time.Now()
	_ = r.nc.SetReadDeadline(start.Add(bound))
	pk, err := mqtt.ReadPacket(r.br, r.v, 1<<20)
	if err != nil {
		if isTimeout(err) || time.Since(start) >= bound {
			t.Fatalf("session with keep alive 1 s still open after %v of WebSocket pings and no MQTT packet; want DISCONNECT 0x8D after 1.5 s", bound)
		}
		t.Fatalf("want DISCONNECT 0x8D, got %v after %v", err, time.Since(start))
	}
	if pk.FixedHeader.Type != packets.Disconnect || pk.ReasonCode != 0x8D {
		t.Fatalf("got %s (reason %#x), want DISCONNECT 0x8D", packets.PacketNames[pk.FixedHeader.Type], pk.ReasonCode)
	}
}
