package router_test

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
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
			f := newFanOut(streams)
			defer f.wg.Wait()
			defer cancel()
			for range streams {
				if transport == "native" {
					f.subscribeWS(ctx, b, wsURL, true)
					continue
				}
				conn, _, err := websocket.Dial(ctx, strings.TrimSuffix(wsURL, "/v1/ws")+"/mqtt",
					&websocket.DialOptions{Subprotocols: []string{"mqtt"}})
				if err != nil {
					b.Fatal(err)
				}
				conn.SetReadLimit(16 << 20)
				if err := conn.Write(ctx, websocket.MessageBinary, mqttHello("", 60, "bench/#")); err != nil {
					b.Fatal(err)
				}
				f.wg.Add(1)
				go func() {
					defer f.wg.Done()
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
								f.ready <- struct{}{}
							}
							rest = rest[size:]
						}
						rest = append(rest[:0:0], rest...)
						f.count(n)
					}
				}()
			}
			f.run(b, window, true, func(int) error {
				_, err := rt.Publish(ctx, engine.Message{Topic: "bench.t", Data: []byte(`{"v":1}`)})
				return err
			})
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
				if err := c.Write(ctx, websocket.MessageBinary, mqttHello("idle-"+strconv.Itoa(i), 0, "idle/xxxxxxxx")); err != nil {
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
