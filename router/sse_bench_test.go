package router_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine"
)

// BenchmarkSSEvsWSDelivery delivers every record to streams reading
// subscribers, over WebSocket and over Server-Sent Events, the publisher
// at most a window ahead of them so nothing is dropped: "busy" is one
// topic, "wide" a wildcard over 1,000 topics written in turn (each stream
// has seen every partition); "stalled" streams stop reading once
// subscribed (their queues fill and drop) and the publisher does not wait.
// It reports the process CPU per delivery (gateway and the in-process
// readers, which only split lines and count message frames).
func BenchmarkSSEvsWSDelivery(b *testing.B) {
	const streams, window = 20, 64
	for _, shape := range []struct {
		name    string
		topics  int
		reading bool
	}{{"busy", 1, true}, {"wide", 1000, true}, {"stalled", 1, false}} {
		for _, transport := range []string{"ws", "sse"} {
			b.Run(shape.name+"/"+transport, func(b *testing.B) {
				rt, _, wsURL := benchGateway(b, false)
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				topic := func(i int) string { return "bench." + strconv.Itoa(i%shape.topics) }
				for i := range shape.topics { // the topics exist before the streams
					if _, err := rt.Publish(ctx, engine.Message{Topic: topic(i), Data: []byte(`0`)}); err != nil {
						b.Fatal(err)
					}
				}
				var got atomic.Int64
				progress := make(chan struct{}, 1)
				count := func(n int64) {
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
					if transport == "ws" {
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
									if !shape.reading {
										<-ctx.Done()
										return
									}
								}
								count(int64(bytes.Count(data, []byte(`{"op":"message"`))))
							}
						}()
						continue
					}
					url := "http" + strings.TrimSuffix(strings.TrimPrefix(wsURL, "ws"), "/v1/ws") + "/v1/sse?pattern=bench.%23"
					req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
					if err != nil {
						b.Fatal(err)
					}
					resp, err := http.DefaultClient.Do(req)
					if err != nil {
						b.Fatal(err)
					}
					wg.Add(1)
					go func() {
						defer wg.Done()
						defer resp.Body.Close()
						rd := bufio.NewReaderSize(resp.Body, 64<<10)
						for {
							line, err := rd.ReadSlice('\n')
							if err != nil {
								return
							}
							switch {
							case bytes.HasPrefix(line, []byte(`data: {"op":"message"`)):
								count(1)
							case bytes.HasPrefix(line, []byte(`data: {"op":"subscribed"`)):
								ready <- struct{}{}
								if !shape.reading {
									<-ctx.Done()
									return
								}
							}
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
					for shape.reading && int64(i-window)*streams > got.Load() {
						<-progress
					}
					if _, err := rt.Publish(ctx, engine.Message{Topic: topic(i), Data: []byte(`{"v":1}`)}); err != nil {
						b.Fatal(err)
					}
				}
				for shape.reading && got.Load() < int64(b.N)*streams {
					<-progress
				}
				b.StopTimer()
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N*streams), "cpu-ns/delivery")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
