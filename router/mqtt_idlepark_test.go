//go:build linux

package router_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/router"
)

// mqttParked reports whether the MQTT session of id on g has its reader
// parked in the idle poller.
func mqttParked(g *gateway, id string) func() bool {
	return func() bool {
		_, ok := router.MQTTParked(g.rt, id)
		return ok
	}
}

// TestMQTTIdleSessionParks: an idle MQTT session over TCP and over
// WebSocket parks its reader in the idle poller; it is woken by a
// PINGREQ, which it answers, parks again, gets its deliveries while
// parked, and a takeover's close ends it with DISCONNECT 0x8E.
func TestMQTTIdleSessionParks(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			g := newGateway(t, withMQTT)
			id := "park-" + transport
			r := dialRaw(t, g, transport, 5)
			r.connect(t, id, 30)
			r.subscribeQoS1(t, "park/t")
			waitUntil(t, "the idle session to park", mqttParked(g, id))
			r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
			r.expect(t, packets.Pingresp)
			waitUntil(t, "the session to park again", mqttParked(g, id))
			pub := g.dial(t)
			pub.publish(t, "park.t", "one")
			if pk := r.expect(t, packets.Publish); string(pk.Payload) != `"one"` {
				t.Fatalf("delivered %q, want %q", pk.Payload, `"one"`)
			}
			r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: 1})
			waitUntil(t, "the session to park after the PUBACK", mqttParked(g, id))
			r2 := dialRaw(t, g, transport, 5)
			r2.connect(t, id, 30)
			if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x8E {
				t.Fatalf("DISCONNECT %#x to the parked session taken over, want 0x8E", d.ReasonCode)
			}
			r.expectClosed(t)
		})
	}
}

// TestMQTTParkedKeepAliveTimeout: a parked MQTT session whose client
// stays silent past 1.5 times its keep alive is ended with DISCONNECT
// 0x8D, although its socket never becomes readable.
func TestMQTTParkedKeepAliveTimeout(t *testing.T) {
	for _, transport := range []string{"tcp", "ws"} {
		t.Run(transport, func(t *testing.T) {
			g := newGateway(t, withMQTT)
			id := "silent-" + transport
			r := dialRaw(t, g, transport, 5)
			r.connect(t, id, 1)
			waitUntil(t, "the idle session to park", mqttParked(g, id))
			if d := r.expect(t, packets.Disconnect); d.ReasonCode != 0x8D {
				t.Fatalf("DISCONNECT %#x, want 0x8D", d.ReasonCode)
			}
			r.expectClosed(t)
		})
	}
}

// TestMQTTIdleParkOff: with Session.NoIdlePark (--idle-park off) an idle
// MQTT session's reader waits on its own goroutine and never parks.
func TestMQTTIdleParkOff(t *testing.T) {
	g := newGateway(t, withMQTT, func(c *gwConfig) { c.router.Session.NoIdlePark = true })
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "unparked", 30)
	r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})
	r.expect(t, packets.Pingresp)
	waitUntil(t, "the idle reader to wait on its goroutine", func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*mqttSession).readLoop(")
	})
	if n, _ := router.MQTTParked(g.rt, ""); n != 0 {
		t.Fatalf("%d MQTT sessions parked with NoIdlePark", n)
	}
}

// TestMQTTParkedWakesUnderLoad: many MQTT sessions over TCP and
// WebSocket, each woken from the idle poller for every PINGREQ of an
// exchange, all at once: no wake is lost (each PINGRESP comes within the
// wait timeout).
func TestMQTTParkedWakesUnderLoad(t *testing.T) {
	const sessions, rounds = 16, 100
	g := newGateway(t, withMQTT)
	clients := make([]*rawMQTT, sessions)
	for i := range clients {
		transport := []string{"tcp", "ws"}[i%2]
		clients[i] = dialRaw(t, g, transport, 5)
		clients[i].connect(t, fmt.Sprint("load-", i), 30)
	}
	errs := make(chan error, sessions)
	for _, r := range clients {
		go func() {
			for range rounds {
				if err := pingPong(r); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range sessions {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// pingPong writes a PINGREQ to r and reads its PINGRESP.
func pingPong(r *rawMQTT) error {
	_ = r.nc.SetDeadline(time.Now().Add(waitTimeout))
	if _, err := r.nc.Write([]byte{packets.Pingreq << 4, 0}); err != nil {
		return err
	}
	pk, err := mqtt.ReadPacket(r.br, r.v, 1<<20)
	if err != nil {
		return err
	}
	if pk.FixedHeader.Type != packets.Pingresp {
		return fmt.Errorf("got %s, want PINGRESP", packets.PacketNames[pk.FixedHeader.Type])
	}
	return nil
}
