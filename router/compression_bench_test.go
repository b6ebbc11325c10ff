package router_test

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// countingListener counts the bytes the server writes on every connection.
type countingListener struct {
	net.Listener
	written atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &serverConn{Conn: c, n: &l.written}, nil
}

type serverConn struct {
	net.Conn
	n *atomic.Int64
}

func (c *serverConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.n.Add(int64(n))
	return n, err
}

// benchGateway serves a router on a counting listener.
func benchGateway(b *testing.B, compression bool) (*router.Router, *countingListener, string) {
	b.Helper()
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1, Compression: compression})
	if err != nil {
		b.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	srv := httptest.NewUnstartedServer(rt)
	srv.Listener = cl
	srv.Start()
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = rt.Shutdown(ctx)
		srv.Close()
		_ = eng.Close(ctx)
	})
	return rt, cl, "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
}

// jsonPayload is a JSON object of about n bytes that looks like telemetry:
// repeated keys, varying numbers.
func jsonPayload(n, seed int) []byte {
	r := rand.New(rand.NewPCG(uint64(seed), uint64(n)))
	var b bytes.Buffer
	b.WriteString(`{"device":"sensor-0042","site":"plant-north","readings":[`)
	for i := 0; b.Len() < n-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"t":%d,"temp":%.2f,"hum":%d,"ok":true}`, 1764582000+i, 15+10*r.Float64(), r.IntN(100))
	}
	b.WriteString(`],"status":"nominal"}`)
	return b.Bytes()
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkDeliveryCompression delivers records of JSON payloads to one
// subscriber with and without permessage-deflate, the publisher at most a
// window ahead of the reader, so nothing is dropped: "lockstep" (one record
// per WebSocket frame, a quiet feed) and "busy" (up to 64 records batched
// per frame, where deflate also finds what records share). It reports the bytes the gateway wrote to the socket per
// delivery and the process CPU per delivery (gateway, plus the in-process
// client's read and inflate).
func BenchmarkDeliveryCompression(b *testing.B) {
	for _, size := range []int{100, 1 << 10, 10 << 10} {
		var payloads [64][]byte // distinct records, so a batch is not one record repeated
		for i := range payloads {
			payloads[i] = jsonPayload(size, i)
		}
		for _, tc := range []struct {
			name   string
			window int64
			on     bool
		}{{"lockstep", 1, false}, {"lockstep", 1, true}, {"busy", 64, false}, {"busy", 64, true}} {
			name, on, window := fmt.Sprintf("%dB/%s/compression=%v", size, tc.name, tc.on), tc.on, tc.window
			b.Run(name, func(b *testing.B) {
				rt, cl, url := benchGateway(b, on)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				mode := websocket.CompressionDisabled
				if on {
					mode = websocket.CompressionNoContextTakeover
				}
				conn, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: mode})
				if err != nil {
					b.Fatal(err)
				}
				defer conn.CloseNow()
				conn.SetReadLimit(16 << 20)
				if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"bench"}`)); err != nil {
					b.Fatal(err)
				}
				var got atomic.Int64
				progress := make(chan struct{}, 1)
				subscribed := make(chan struct{})
				readDone := make(chan struct{})
				go func() {
					defer close(readDone)
					for {
						_, data, err := conn.Read(ctx)
						if err != nil {
							return
						}
						if bytes.Contains(data, []byte(`"op":"subscribed"`)) {
							close(subscribed)
						}
						got.Add(int64(bytes.Count(data, []byte(`{"op":"message"`))))
						select {
						case progress <- struct{}{}:
						default:
						}
					}
				}()
				<-subscribed
				b.ReportAllocs()
				b.ResetTimer()
				wire0, cpu0 := cl.written.Load(), cpuTime()
				for i := range b.N {
					for int64(i)-got.Load() >= window {
						<-progress
					}
					if _, err := rt.Publish(ctx, engine.Message{Topic: "bench", Data: payloads[i%len(payloads)]}); err != nil {
						b.Fatal(err)
					}
				}
				for got.Load() < int64(b.N) {
					<-progress
				}
				b.StopTimer()
				b.ReportMetric(float64(cl.written.Load()-wire0)/float64(b.N), "wire-B/op")
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
				cancel()
				conn.CloseNow()
				<-readDone
			})
		}
	}
}

// BenchmarkIdleConnectionMemory opens b.N idle WebSocket sessions (each with
// a subscription) with and without compression negotiated and reports the
// live heap per session, the in-process client side of each connection
// included.
func BenchmarkIdleConnectionMemory(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("compression=%v", on), func(b *testing.B) {
			_, _, url := benchGateway(b, on)
			ctx := context.Background()
			mode := websocket.CompressionDisabled
			if on {
				mode = websocket.CompressionNoContextTakeover
			}
			var m0, m1 runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&m0)
			conns := make([]*websocket.Conn, 0, b.N)
			defer func() {
				for _, c := range conns {
					c.CloseNow()
				}
			}()
			for range b.N {
				c, _, err := websocket.Dial(ctx, url, &websocket.DialOptions{CompressionMode: mode})
				if err != nil {
					b.Fatal(err)
				}
				conns = append(conns, c)
				if err := c.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"idle.`+strings.Repeat("x", 8)+`"}`)); err != nil {
					b.Fatal(err)
				}
				if _, _, err := c.Read(ctx); err != nil { // welcome (and maybe the reply)
					b.Fatal(err)
				}
			}
			runtime.GC()
			runtime.ReadMemStats(&m1)
			b.ReportMetric(float64(int64(m1.HeapInuse)-int64(m0.HeapInuse))/float64(b.N), "heap-B/conn")
		})
	}
}
