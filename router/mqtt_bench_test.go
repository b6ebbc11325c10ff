package router_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/mqtt"
)

// BenchmarkMQTTvsNativeFanOut delivers every record to reading
// subscribers over WebSocket, native sessions against MQTT 5 sessions at
// QoS 0 (GET /mqtt), the publisher at most a window ahead of them so
// nothing is dropped. It reports the process CPU per delivery (gateway and
// the in-process readers, which only find frame or packet boundaries).
func BenchmarkMQTTvsNativeFanOut(b *testing.B) {
	const streams, window = 100, 64
	for _, transport := range []string{"native", "mqtt"} {
		b.Run(transport, func(b *testing.B) {
			rt, _, wsURL := benchGateway(b, false)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if _, err := rt.Publish(ctx, engine.Message{Topic: "bench.t", Data: []byte(`0`)}); err != nil {
				b.Fatal(err)
			}
			var got atomic.Int64
			progress := make(chan struct{}, 1)
			count := func(n int64) {
				if n == 0 {
					return
				}
				got.Add(n)
				select {
				case progress <- struct{}{}:
				default:
				}
			}
			var wg sync.WaitGroup
			defer wg.Wait()
			defer cancel()
			ready := make(chan struct{}, streams)
			for range streams {
				if transport == "native" {
					conn, _, err := websocket.Dial(ctx, wsURL, nil)
					if err != nil {
						b.Fatal(err)
					}
					conn.SetReadLimit(16 << 20)
					if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"bench.#"}`)); err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer conn.CloseNow()
						for {
							_, data, err := conn.Read(ctx)
							if err != nil {
								return
							}
							if bytes.Contains(data, []byte(`"op":"subscribed"`)) {
								ready <- struct{}{}
							}
							count(int64(bytes.Count(data, []byte(`{"op":"message"`))))
						}
					}()
					continue
				}
				conn, _, err := websocket.Dial(ctx, strings.TrimSuffix(wsURL, "/v1/ws")+"/mqtt",
					&websocket.DialOptions{Subprotocols: []string{"mqtt"}})
				if err != nil {
					b.Fatal(err)
				}
				conn.SetReadLimit(16 << 20)
				var hello bytes.Buffer
				con := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
					Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), Clean: true, Keepalive: 60}}
				_ = con.ConnectEncode(&hello)
				sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 5,
					PacketID: 1, Filters: packets.Subscriptions{{Filter: "bench/#"}}}
				_ = sub.SubscribeEncode(&hello)
				if err := conn.Write(ctx, websocket.MessageBinary, hello.Bytes()); err != nil {
					b.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer conn.CloseNow()
					var rest []byte
					for {
						_, data, err := conn.Read(ctx)
						if err != nil {
							return
						}
						rest = append(rest, data...)
						n := int64(0)
						for {
							size, _, ok := mqtt.Span(rest)
							if !ok {
								break
							}
							switch rest[0] >> 4 {
							case packets.Publish:
								n++
							case packets.Suback:
								ready <- struct{}{}
							}
							rest = rest[size:]
						}
						rest = append(rest[:0:0], rest...)
						count(n)
					}
				}()
			}
			for range streams {
				<-ready
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0 := cpuTime()
			for i := range b.N {
				for int64(i-window)*streams > got.Load() {
					<-progress
				}
				if _, err := rt.Publish(ctx, engine.Message{Topic: "bench.t", Data: []byte(`{"v":1}`)}); err != nil {
					b.Fatal(err)
				}
			}
			for got.Load() < int64(b.N)*streams {
				<-progress
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*streams), "cpu-ns/delivery")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// BenchmarkMQTTIdleMemory measures the memory of idle subscribed
// sessions: native WebSocket against MQTT 5 over WebSocket (GET /mqtt),
// the same client library on both, so the figures differ by the
// gateway's side. Heap and stacks in use, per connection, both sides in
// this process.
func BenchmarkMQTTIdleMemory(b *testing.B) {
	for _, transport := range []string{"native", "mqtt"} {
		b.Run(transport, func(b *testing.B) {
			_, _, url := benchGateway(b, false)
			ctx := context.Background()
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			conns := make([]*websocket.Conn, 0, b.N)
			defer func() {
				for _, c := range conns {
					c.CloseNow()
				}
			}()
			for i := range b.N {
				if transport == "native" {
					c, _, err := websocket.Dial(ctx, url, nil)
					if err != nil {
						b.Fatal(err)
					}
					conns = append(conns, c)
					if err := c.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"idle.xxxxxxxx"}`)); err != nil {
						b.Fatal(err)
					}
					for range 2 { // welcome, subscribed (perhaps in one message)
						_, data, err := c.Read(ctx)
						if err != nil {
							b.Fatal(err)
						}
						if bytes.Contains(data, []byte(`"subscribed"`)) {
							break
						}
					}
					continue
				}
				c, _, err := websocket.Dial(ctx, strings.TrimSuffix(url, "/v1/ws")+"/mqtt", &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
				var hello bytes.Buffer
				con := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: 5,
					Connect: packets.ConnectParams{ProtocolName: []byte("MQTT"), ClientIdentifier: "idle-" + strconv.Itoa(i), Clean: true}}
				_ = con.ConnectEncode(&hello)
				sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 5,
					PacketID: 1, Filters: packets.Subscriptions{{Filter: "idle/xxxxxxxx"}}}
				_ = sub.SubscribeEncode(&hello)
				if err := c.Write(ctx, websocket.MessageBinary, hello.Bytes()); err != nil {
					b.Fatal(err)
				}
				var got []byte
				for !bytes.Contains(got, []byte{packets.Suback << 4}) {
					_, data, err := c.Read(ctx)
					if err != nil {
						b.Fatal(err)
					}
					got = append(got, data...)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			used := func(m *runtime.MemStats) int64 { return int64(m.HeapInuse + m.StackInuse) }
			b.ReportMetric(float64(used(&m1)-used(&m0))/float64(b.N), "B/conn")
		})
	}
}
