package router_test

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"

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
				f := newFanOut(streams)
				defer f.wg.Wait()
				defer cancel()
				for range streams {
					if transport == "ws" {
						f.subscribeWS(ctx, b, wsURL, shape.reading)
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
					f.wg.Add(1)
					go func() {
						defer f.wg.Done()
						defer resp.Body.Close()
						rd := bufio.NewReaderSize(resp.Body, 64<<10)
						for {
							line, err := rd.ReadSlice('\n')
							if err != nil {
								return
							}
							switch {
							case bytes.HasPrefix(line, []byte(`data: {"op":"message"`)):
								f.count(1)
							case bytes.HasPrefix(line, []byte(`data: {"op":"subscribed"`)):
								f.ready <- struct{}{}
								if !shape.reading {
									<-ctx.Done()
									return
								}
							}
						}
					}()
				}
				f.run(b, window, shape.reading, func(i int) error {
					_, err := rt.Publish(ctx, engine.Message{Topic: topic(i), Data: []byte(`{"v":1}`)})
					return err
				})
			})
		}
	}
}
