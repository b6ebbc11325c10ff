package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// fakeSocket records what the writer does. write may be replaced per test.
type fakeSocket struct {
	mu       sync.Mutex
	writes   [][]byte
	closes   []websocket.StatusCode
	closeNow int
	aborted  chan struct{} // closed by the first closeNow
	writeFn  func(ctx context.Context, p []byte) error
	pingFn   func(ctx context.Context) error
}

func newFakeSocket() *fakeSocket { return &fakeSocket{aborted: make(chan struct{})} }

func (f *fakeSocket) socket() socket {
	return socket{
		write: func(ctx context.Context, p []byte) error {
			if f.writeFn != nil {
				if err := f.writeFn(ctx, p); err != nil {
					return err
				}
			}
			f.mu.Lock()
			f.writes = append(f.writes, bytes.Clone(p))
			f.mu.Unlock()
			return nil
		},
		close: func(code websocket.StatusCode, reason string) error {
			f.mu.Lock()
			f.closes = append(f.closes, code)
			f.mu.Unlock()
			return nil
		},
		closeNow: func() error {
			f.mu.Lock()
			defer f.mu.Unlock()
			if f.closeNow == 0 {
				close(f.aborted)
			}
			f.closeNow++
			return nil
		},
		ping: func(ctx context.Context) error {
			if f.pingFn != nil {
				return f.pingFn(ctx)
			}
			<-ctx.Done()
			return ctx.Err()
		},
	}
}

func (f *fakeSocket) frames() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, w := range f.writes {
		out = append(out, strings.Split(string(w), "\n")...)
	}
	return out
}

// startWriter runs the writer goroutine of s as Run would and returns a
// channel closed when it and everything it started have exited.
func startWriter(s *Session) <-chan struct{} {
	s.startWriter()
	done := make(chan struct{})
	go func() {
		<-s.endChan(stepWriterEnded) // no writer starts after this
		s.wg.Wait()
		close(done)
	}()
	return done
}

func TestWriterBatches(t *testing.T) {
	tests := []struct {
		name       string
		maxBatch   int
		frames     int
		frameSize  int
		wantWrites int
	}{
		{"all in one frame", 1 << 10, 100, 8, 1},
		{"max batch bytes respected", 64, 20, 8, 3}, // 7 frames of 8 bytes + 6 separators = 62
		{"a frame over the limit goes alone", 16, 3, 40, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := newFakeSocket()
			s := newSession("w", Options{MaxBatchBytes: tt.maxBatch, EncodeGap: testGap}, fs.socket())
			var want []string
			for i := range tt.frames {
				f := fmt.Sprintf("%0*d", tt.frameSize, i)
				if !s.Send(Item{Frame: []byte(f)}) {
					t.Fatal("Send refused")
				}
				want = append(want, f)
			}
			s.Close(websocket.StatusNormalClosure, "")
			<-startWriter(s)
			fs.mu.Lock()
			writes, closes := len(fs.writes), fs.closes
			for _, w := range fs.writes {
				if bytes.Count(w, []byte("\n")) > 0 && len(w) > tt.maxBatch {
					t.Errorf("write of %d bytes over MaxBatchBytes %d", len(w), tt.maxBatch)
				}
			}
			fs.mu.Unlock()
			if writes != tt.wantWrites {
				t.Errorf("%d writes, want %d", writes, tt.wantWrites)
			}
			if got := fs.frames(); strings.Join(got, ",") != strings.Join(want, ",") {
				t.Errorf("frames %q, want %q", got, want)
			}
			if len(closes) != 1 || closes[0] != websocket.StatusNormalClosure {
				t.Errorf("closes %v, want [1000]", closes)
			}
			st := s.Stats()
			if st.Writes != uint64(tt.wantWrites) || st.Sent != uint64(tt.frames) || st.Queued != 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestWriterWakes checks that the writer sleeps on the queue's signal and
// writes what is sent while it runs.
func TestWriterWakes(t *testing.T) {
	fs := newFakeSocket()
	written := make(chan []byte, 10)
	fs.writeFn = func(_ context.Context, p []byte) error {
		written <- bytes.Clone(p)
		return nil
	}
	s := newSession("w", Options{EncodeGap: testGap}, fs.socket())
	done := startWriter(s)
	for i := range 3 {
		it := msg(1, int64(i), 0, DropOld)
		s.Send(it)
		if got := <-written; !bytes.Equal(got, it.Frame) {
			t.Fatalf("wrote %q, want %q", got, it.Frame)
		}
	}
	s.Close(websocket.StatusGoingAway, "bye")
	<-done
	if s.Send(msg(1, 9, 0, DropOld)) {
		t.Error("Send after Close queued")
	}
}

func TestWriterWriteErrorEnds(t *testing.T) {
	fs := newFakeSocket()
	boom := errors.New("boom")
	fs.writeFn = func(context.Context, []byte) error { return boom }
	s := newSession("w", Options{EncodeGap: testGap}, fs.socket())
	done := startWriter(s)
	s.Send(ctl("a"))
	<-done
	<-fs.aborted
	if !errors.Is(s.causeNow(), boom) {
		t.Errorf("cause %v, want %v", s.causeNow(), boom)
	}
	if s.Send(ctl("b")) {
		t.Error("Send after the writer ended queued")
	}
}

func TestWriterWriteTimeout(t *testing.T) {
	fs := newFakeSocket()
	// The write blocks until the watchdog closes the socket.
	fs.writeFn = func(context.Context, []byte) error {
		<-fs.aborted
		return errors.New("closed")
	}
	s := newSession("w", Options{EncodeGap: testGap, WriteTimeout: 1}, fs.socket())
	done := startWriter(s)
	s.Send(ctl("a"))
	<-done
	if !errors.Is(s.causeNow(), ErrWriteTimeout) {
		t.Errorf("cause %v, want ErrWriteTimeout", s.causeNow())
	}
}

func TestWriterFlushTimeout(t *testing.T) {
	fs := newFakeSocket()
	fs.writeFn = func(context.Context, []byte) error {
		<-fs.aborted
		return errors.New("closed")
	}
	s := newSession("w", Options{EncodeGap: testGap, FlushTimeout: 20 * time.Millisecond}, fs.socket())
	s.Send(ctl("a"))
	s.Close(websocket.StatusGoingAway, "")
	<-startWriter(s)
	// The flush budget, not the 10s WriteTimeout, bounds the write, which
	// ends the session without a close handshake.
	<-fs.aborted
	if len(fs.closes) != 0 {
		t.Errorf("closes %v after a failed flush", fs.closes)
	}
}

func TestWriterGapAtBatchEnd(t *testing.T) {
	fs := newFakeSocket()
	s := newSession("w", Options{QueueMessages: 1, EncodeGap: testGap}, fs.socket())
	s.Send(msg(1, 0, 0, DropNew))
	if s.Send(msg(2, 0, 0, DropNew)) {
		t.Fatal("Send over the bound queued")
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-startWriter(s)
	if got := fs.frames(); strings.Join(got, ",") != "m1:0,g2:0-1" {
		t.Errorf("frames %q", got)
	}
	if st := s.Stats(); st.Dropped != 1 || st.Gaps != 1 || st.Writes != 1 || st.Sent != 2 {
		t.Errorf("stats %+v", st)
	}
}

func TestWriterPingFailureEnds(t *testing.T) {
	fs := newFakeSocket()
	boom := errors.New("no pong")
	fs.pingFn = func(context.Context) error { return boom }
	s := newSession("w", Options{EncodeGap: testGap, PingInterval: 1}, fs.socket())
	<-startWriter(s)
	if !errors.Is(s.causeNow(), boom) {
		t.Errorf("cause %v, want %v", s.causeNow(), boom)
	}
}

func TestWriterDisconnectPolicy(t *testing.T) {
	fs := newFakeSocket()
	s := newSession("w", Options{QueueMessages: 1, EncodeGap: testGap}, fs.socket())
	s.Send(msg(1, 0, 0, Disconnect))
	if s.Send(msg(1, 1, 0, Disconnect)) {
		t.Fatal("Send over the bound queued")
	}
	<-startWriter(s)
	if len(fs.closes) != 1 || fs.closes[0] != websocket.StatusTryAgainLater {
		t.Errorf("closes %v, want [1013]", fs.closes)
	}
	if len(fs.writes) != 0 {
		t.Errorf("slow consumer got %d writes before the close", len(fs.writes))
	}
	if !errors.Is(s.causeNow(), ErrSlowConsumer) {
		t.Errorf("cause %v", s.causeNow())
	}
}

// TestWriterOnSent checks that every written item with a Ref is reported
// once, after its write, and that dropped items are reported to OnDrop with
// their Ref instead.
func TestWriterOnSent(t *testing.T) {
	fs := newFakeSocket()
	var mu sync.Mutex
	var sent, dropped []any
	s := newSession("w", Options{
		QueueMessages: 2,
		EncodeGap:     testGap,
		OnSent: func(ref any, at time.Time) {
			if at.IsZero() {
				t.Error("zero write time")
			}
			mu.Lock()
			sent = append(sent, ref)
			mu.Unlock()
		},
		OnDrop: func(it *Item) {
			mu.Lock()
			dropped = append(dropped, it.Ref)
			mu.Unlock()
		},
	}, fs.socket())
	for i := range 3 {
		it := msg(1, int64(i), 0, DropNew)
		it.Ref = i
		s.Send(it)
	}
	s.Send(Item{Frame: []byte(`{"op":"control"}`)}) // no Ref: not reported
	s.Close(websocket.StatusNormalClosure, "")
	<-startWriter(s)
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(sent) != "[0 1]" || fmt.Sprint(dropped) != "[2]" {
		t.Fatalf("sent %v, dropped %v; want [0 1] and [2]", sent, dropped)
	}
}

// causeNow returns why s ended as far as known, before Done too.
func (s *Session) causeNow() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.causeLocked()
}
