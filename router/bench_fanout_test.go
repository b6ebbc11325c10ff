package router_test

// The rig the fan-out benchmarks share (BenchmarkSSEvsWSDelivery,
// BenchmarkMQTTvsNativeFanOut): streams whose readers count the messages
// they receive, and a timed publish loop that keeps at most a window of
// records ahead of them, reporting the process CPU per delivery.

import (
	"bytes"
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
)

// fanOut counts the deliveries of a benchmark's streams. Its readers run
// until the benchmark's context ends; wg waits for them.
type fanOut struct {
	streams  int
	got      atomic.Int64   // messages the streams have read
	progress chan struct{}  // a value after count added to got
	ready    chan struct{}  // a value per stream once it is subscribed
	wg       sync.WaitGroup // the streams' readers
}

func newFanOut(streams int) *fanOut {
	return &fanOut{streams: streams, progress: make(chan struct{}, 1), ready: make(chan struct{}, streams)}
}

// count adds n deliveries and wakes the publisher.
func (f *fanOut) count(n int64) {
	if n == 0 {
		return
	}
	f.got.Add(n)
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

// subscribeWS opens a native WebSocket stream at wsURL subscribed to
// bench.#, whose reader counts the message frames it reads until ctx
// ends; a stream that is not reading stops once it is subscribed.
func (f *fanOut) subscribeWS(ctx context.Context, b *testing.B, wsURL string, reading bool) {
	b.Helper()
	conn, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		b.Fatal(err)
	}
	conn.SetReadLimit(16 << 20)
	if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"bench.#"}`)); err != nil {
		b.Fatal(err)
	}
	f.wg.Add(1)
	go func() {
		defer f.wg.Done()
		defer conn.CloseNow()
		for {
			_, data, err := conn.Read(ctx)
			if err != nil {
				return
			}
			if bytes.Contains(data, []byte(`"op":"subscribed"`)) {
				f.ready <- struct{}{}
				if !reading {
					<-ctx.Done()
					return
				}
			}
			f.count(int64(bytes.Count(data, []byte(`{"op":"message"`))))
		}
	}()
}

// run waits for every stream to be subscribed, then, timed, publishes
// record i with publish(i) for i below b.N. With wait set the publisher
// stays at most window records ahead of the streams and, at the end,
// waits for every delivery. It reports the process CPU per delivery.
func (f *fanOut) run(b *testing.B, window int, wait bool, publish func(i int) error) {
	b.Helper()
	for range f.streams {
		<-f.ready
	}
	streams := int64(f.streams)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	for i := range b.N {
		for wait && int64(i-window)*streams > f.got.Load() {
			<-f.progress
		}
		if err := publish(i); err != nil {
			b.Fatal(err)
		}
	}
	for wait && f.got.Load() < int64(b.N)*streams {
		<-f.progress
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(int64(b.N)*streams), "cpu-ns/delivery")
	b.ReportMetric(0, "ns/op")
}

// mqttHello is an MQTT 5 CONNECT (clean start) followed by a SUBSCRIBE to
// filter at QoS 0, for a session opened in one write.
func mqttHello(id string, keepAlive uint16, filter string) []byte {
	var hello bytes.Buffer
	con := connectPacket(id, keepAlive)
	con.ProtocolVersion = 5
	_ = con.ConnectEncode(&hello)
	sub := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}, ProtocolVersion: 5,
		PacketID: 1, Filters: packets.Subscriptions{{Filter: filter}}}
	_ = sub.SubscribeEncode(&hello)
	return hello.Bytes()
}
