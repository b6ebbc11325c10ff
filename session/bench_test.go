package session

import (
	"context"
	"strconv"
	"testing"

	"github.com/coder/websocket"
)

func benchItems(streams, prios int) []Item {
	items := make([]Item, streams)
	for i := range items {
		s := Stream{Sub: uint64(i + 1), Topic: "orders.created", Partition: i % 4}
		items[i] = Item{
			Frame:    []byte(`{"op":"message","pattern":"orders.*","topic":"orders.created","partition":0,"offset":` + strconv.Itoa(i) + `,"data":{"n":1},"time":"2026-11-29T08:00:00.123Z"}`),
			Stream:   s,
			Priority: uint8(i % prios),
		}
	}
	return items
}

// BenchmarkQueueSendDrain pushes messages over 16 streams and drains them
// in batches of 64 KiB every 64 pushes; one op is one message.
func BenchmarkQueueSendDrain(b *testing.B) {
	for _, prios := range []int{1, 4} {
		b.Run("priorities="+strconv.Itoa(prios), func(b *testing.B) {
			benchPushDrain(b, NewQueue(Options{EncodeGap: testGap}), prios, 64)
		})
	}
}

// BenchmarkQueueSendFull pushes into a full queue (DropOld): every push
// evicts a message and records a gap, and a drain every 256 pushes writes
// the gaps.
func BenchmarkQueueSendFull(b *testing.B) {
	benchPushDrain(b, NewQueue(Options{QueueMessages: 128, EncodeGap: testGap}), 4, 256)
}

// benchPushDrain pushes b.N messages of 16 streams spread over prios
// priorities into q, timed, and drains q whole every `every` pushes.
func benchPushDrain(b *testing.B, q *Queue, prios, every int) {
	items := benchItems(16, prios)
	buf := make([]byte, 0, DefaultMaxBatchBytes+1024)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		it := items[i%len(items)]
		it.Offset = int64(i)
		q.Push(it)
		if i%every == every-1 {
			for n := 1; n > 0; {
				buf, n = q.AppendBatch(buf[:0], DefaultMaxBatchBytes)
			}
		}
	}
}

// BenchmarkWriterBatch measures the writer's path: Send, then one batch
// built and written through the injected socket, with its write watchdog,
// every 64 messages. One op is one message.
func BenchmarkWriterBatch(b *testing.B) {
	var written int
	benchWriter(b, socket{
		write: func(_ context.Context, p []byte) error {
			written += len(p)
			return nil
		},
		closeNow: func() error { return nil },
	})
}

// benchWriter runs BenchmarkWriterBatch's loop over sock.
func benchWriter(b *testing.B, sock socket) {
	s := newSession("bench", Options{EncodeGap: testGap}, sock)
	items := benchItems(16, 4)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		it := items[i%len(items)]
		it.Offset = int64(i)
		s.Send(it)
		if i%64 == 63 {
			if _, err := s.writeBatch(s.opts.WriteTimeout); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.StopTimer()
	for more := true; more; {
		more, _ = s.writeBatch(s.opts.WriteTimeout)
	}
	b.ReportMetric(float64(s.Stats().Writes)/float64(b.N), "writes/op")
}

// BenchmarkWriterWake measures a message that finds the writer with
// nothing to do, as every message of a quiet subscription does: Send, then
// wait until it is written. One op is one message and one write.
func BenchmarkWriterWake(b *testing.B) {
	written := make(chan struct{}, 1)
	s := NewOneWay("bench", Options{EncodeGap: testGap}, Transport{
		Write: func(context.Context, []byte) error {
			written <- struct{}{}
			return nil
		},
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
	})
	ran := make(chan error, 1)
	go func() { ran <- s.Run(context.Background(), nil) }()
	items := benchItems(16, 1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		it := items[i%len(items)]
		it.Offset = int64(i)
		s.Send(it)
		<-written
	}
	b.StopTimer()
	s.Close(websocket.StatusNormalClosure, "")
	if err := <-ran; err != nil {
		b.Fatal(err)
	}
}

// BenchmarkWriterPieces is BenchmarkWriterBatch for a socket that writes
// its own frames (writeText): the batch's frames are handed over as
// pieces, not copied into a buffer.
func BenchmarkWriterPieces(b *testing.B) {
	var written int
	benchWriter(b, socket{
		writeText: func(_ [][]byte, size int) error {
			written += size
			return nil
		},
		closeNow: func() error { return nil },
	})
}
