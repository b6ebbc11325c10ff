// Command jsref is the raw-JetStream reference for Switchyard's publish
// benchmarks: it publishes fixed-size records into one subject of a
// JetStream stream with nats.go's asynchronous publish, keeping --window
// publishes outstanding per connection, and reports acknowledged
// publishes per second and the acknowledgement latency. Run it against
// the same NATS servers, with the same record size and replicas, as the
// gateway being measured (docs/BENCHMARKS.md):
//
//	go run ./loadtest/jsref --url nats://127.0.0.1:4222 --replicas 3 --size 83 --duration 10s
//
// It creates the stream (--stream, subject <stream>.rec) and deletes it at
// the end.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "jsref:", err)
		os.Exit(1)
	}
}

// run is the whole reference run (flags, stream, publishers, the
// report) in one function of about 100 lines: a standalone program read
// top to bottom beside the loadtest it is the reference for.
func run() error {
	url := flag.String("url", nats.DefaultURL, "NATS server URLs, comma-separated")
	stream := flag.String("stream", "jsref", "stream to create (and delete at the end)")
	replicas := flag.Int("replicas", 1, "stream replicas")
	size := flag.Int("size", 83, "record bytes")
	window := flag.Int("window", 64, "publishes outstanding per connection")
	conns := flag.Int("publishers", 1, "publishing connections")
	duration := flag.Duration("duration", 10*time.Second, "how long to publish")
	flag.Parse()
	if *window < 1 || *conns < 1 || *size < 1 || *duration <= 0 {
		return fmt.Errorf("window, publishers, size and duration must be positive")
	}

	nc, err := nats.Connect(*url)
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	subject := *stream + ".rec"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: *stream, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Replicas: *replicas}); err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = js.DeleteStream(ctx, *stream)
	}()

	payload := []byte(strings.Repeat("x", *size))
	var mu sync.Mutex
	var lat []time.Duration
	var errs int
	var wg sync.WaitGroup
	start := time.Now()
	end := start.Add(*duration)
	for range *conns {
		c, err := nats.Connect(*url)
		if err != nil {
			return err
		}
		defer c.Close()
		pjs, err := jetstream.New(c, jetstream.WithPublishAsyncMaxPending(*window))
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() { // publishes until end, then waits for its acknowledgements
			defer wg.Done()
			var mine []time.Duration
			bad := 0
			type out struct {
				at  time.Time
				fut jetstream.PubAckFuture
			}
			q := make(chan out, *window)
			done := make(chan struct{})
			go func() { // reads the acknowledgements in publish order
				defer close(done)
				for o := range q {
					select {
					case <-o.fut.Ok():
						mine = append(mine, time.Since(o.at))
					case <-o.fut.Err():
						bad++
					}
				}
			}()
			for time.Now().Before(end) {
				at := time.Now()
				fut, err := pjs.PublishAsync(subject, payload)
				if err != nil {
					bad++
					continue
				}
				q <- out{at, fut}
			}
			close(q)
			<-done
			mu.Lock()
			lat = append(lat, mine...)
			errs += bad
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	slices.Sort(lat)
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))]
	}
	fmt.Printf("raw JetStream: %d publishers x %d outstanding, %d-byte records, replicas %d\n", *conns, *window, *size, *replicas)
	fmt.Printf("acknowledged   %d (%.0f/s), %d errors, %.2fs\n", len(lat), float64(len(lat))/elapsed.Seconds(), errs, elapsed.Seconds())
	fmt.Printf("ack latency    p50 %.3f  p99 %.3f  max %.3f ms\n", ms(pct(0.5)), ms(pct(0.99)), ms(pct(1)))
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
