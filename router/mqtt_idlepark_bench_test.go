//go:build linux

package router_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// BenchmarkMQTTIdleParked measures the memory of b.N idle subscribed MQTT
// 5 sessions over TCP and over WebSocket (GET /mqtt), with the idle
// poller (park=on) and without (park=off, --idle-park off): heap and
// stacks in use per connection, both sides in this process (the TCP
// client holds a socket only, the WebSocket client its library's
// connection too, the same with either setting).
func BenchmarkMQTTIdleParked(b *testing.B) {
	for _, transport := range []string{"tcp", "ws"} {
		for _, park := range []bool{true, false} {
			name := fmt.Sprintf("%s/park=%v", transport, map[bool]string{true: "on", false: "off"}[park])
			b.Run(name, func(b *testing.B) { benchMQTTIdle(b, transport, park) })
		}
	}
}

func benchMQTTIdle(b *testing.B, transport string, park bool) {
	eng := memengine.New(memengine.Options{})
	opts := router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1}
	opts.MQTT.Addr = "127.0.0.1:0"
	opts.Session.NoIdlePark = !park
	rt, err := router.New(opts)
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	conns := make([]net.Conn, 0, b.N)
	b.Cleanup(func() {
		for _, c := range conns {
			_ = c.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = rt.Shutdown(ctx)
		srv.Close()
		_ = eng.Close(ctx)
	})
	ctx := context.Background()
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	g0 := runtime.NumGoroutine()
	for i := range b.N {
		var nc net.Conn
		if transport == "tcp" {
			nc, err = net.Dial("tcp", rt.MQTTAddr().String())
		} else {
			var ws *websocket.Conn
			ws, _, err = websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/mqtt", &websocket.DialOptions{Subprotocols: []string{"mqtt"}})
			if err == nil {
				nc = websocket.NetConn(context.Background(), ws, websocket.MessageBinary)
			}
		}
		if err != nil {
			b.Fatal(err)
		}
		conns = append(conns, nc)
		if _, err := nc.Write(mqttHello("idle-"+strconv.Itoa(i), 0, "idle/xxxxxxxx")); err != nil {
			b.Fatal(err)
		}
		if err := readUntilSuback(nc); err != nil {
			b.Fatalf("connection %d: %v", i, err)
		}
	}
	if park {
		deadline := time.Now().Add(waitTimeout)
		for n, _ := router.MQTTParked(rt, ""); n < b.N; n, _ = router.MQTTParked(rt, "") {
			if time.Now().After(deadline) {
				b.Fatalf("%d of %d idle sessions parked", n, b.N)
			}
			time.Sleep(time.Millisecond)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&m1)
	used := func(m *runtime.MemStats) int64 { return int64(m.HeapInuse + m.StackInuse) }
	b.ReportMetric(float64(used(&m1)-used(&m0))/float64(b.N), "B/conn")
	b.ReportMetric(float64(m1.StackInuse-m0.StackInuse)/float64(b.N), "stackB/conn")
	b.ReportMetric(float64(runtime.NumGoroutine()-g0)/float64(b.N), "goroutines/conn")
}

// readUntilSuback reads from nc until a SUBACK's first byte has come.
func readUntilSuback(nc net.Conn) error {
	_ = nc.SetReadDeadline(time.Now().Add(waitTimeout))
	defer nc.SetReadDeadline(time.Time{})
	var got []byte
	buf := make([]byte, 256)
	for !bytes.Contains(got, []byte{packets.Suback << 4}) {
		n, err := nc.Read(buf)
		if err != nil && err != io.EOF || n == 0 {
			return fmt.Errorf("no SUBACK: %v", err)
		}
		got = append(got, buf[:n]...)
	}
	return nil
}
