package session

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"testing"
)

// pieceReader hands out data in pieces of random sizes up to max, then
// ends with end (io.EOF for a whole message).
type pieceReader struct {
	data   []byte
	max    int
	rng    *rand.Rand
	end    error
	atEnd  func() // called once, when the data is used up
	called bool
}

func (r *pieceReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		if !r.called && r.atEnd != nil {
			r.called = true
			r.atEnd()
		}
		return 0, r.end
	}
	n := min(len(p), len(r.data), 1+r.rng.IntN(r.max))
	copy(p, r.data[:n])
	r.data = r.data[n:]
	return n, nil
}

type handlerFunc func(s *Session, data []byte)

func (f handlerFunc) HandleFrame(s *Session, data []byte) { f(s, data) }

// TestReadFrameWhole: messages of every size class the reader buffers
// differently reach the handler byte for byte.
func TestReadFrameWhole(t *testing.T) {
	s := newSession("t", Options{EncodeGap: testGap}, newFakeSocket().socket())
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{0, 1, 4095, 4096, 4097, 64<<10 - 1, 64 << 10, 64<<10 + 1, 200 << 10, 1 << 20} {
		for _, piece := range []int{1 << 20, 1000, 3} {
			if piece == 3 && size > 64<<10 {
				continue // slow and adds nothing
			}
			t.Run(fmt.Sprintf("%d in pieces of %d", size, piece), func(t *testing.T) {
				want := make([]byte, size)
				for i := range want {
					want[i] = 'a' + byte(i%26)
				}
				var got []byte
				r := &pieceReader{data: want, max: piece, rng: rng, end: io.EOF}
				err := s.readFrame(r, handlerFunc(func(_ *Session, data []byte) { got = bytes.Clone(data) }))
				if err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("handler got %d bytes, want %d", len(got), size)
				}
			})
		}
	}
}

// TestReadFrameHoldsWhatArrived: while a large message is still arriving
// (a fragmented message parked by its sender), the reader has allocated
// about what arrived, not a multiple of it: no buffer is grown by copying.
func TestReadFrameHoldsWhatArrived(t *testing.T) {
	const size = 960 << 10
	s := newSession("t", Options{EncodeGap: testGap}, newFakeSocket().socket())
	errParked := errors.New("parked")
	var before, parked runtime.MemStats
	r := &pieceReader{
		data: bytes.Repeat([]byte("x"), size), max: 1000, rng: rand.New(rand.NewPCG(3, 4)), end: errParked,
		atEnd: func() { runtime.ReadMemStats(&parked) },
	}
	runtime.ReadMemStats(&before)
	err := s.readFrame(r, handlerFunc(func(*Session, []byte) { t.Error("an unfinished message was handled") }))
	if !errors.Is(err, errParked) {
		t.Fatalf("readFrame: %v", err)
	}
	allocated := parked.TotalAlloc - before.TotalAlloc
	if limit := uint64(size + 128<<10); allocated > limit {
		t.Fatalf("reading %d bytes of an unfinished message allocated %d bytes (limit %d)", size, allocated, limit)
	}
	t.Logf("%d bytes arrived, %d allocated", size, allocated)
}

// BenchmarkReadFrame reads one message per iteration from memory: small
// messages take the pooled buffer only, long ones the chunks.
func BenchmarkReadFrame(b *testing.B) {
	s := newSession("b", Options{EncodeGap: testGap}, newFakeSocket().socket())
	h := handlerFunc(func(*Session, []byte) {})
	for _, size := range []int{200, 40 << 10, 300 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			data := bytes.Repeat([]byte("x"), size)
			r := &pieceReader{max: 64 << 10, rng: rand.New(rand.NewPCG(5, 6)), end: io.EOF}
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				r.data = data
				if err := s.readFrame(r, h); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
