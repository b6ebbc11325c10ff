package session

import (
	"bufio"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestSendDeferredWaitsForFlush: items sent through a Deferral are queued
// without waking the parked writer; the Flush wakes it once and they go
// out in one write.
func TestSendDeferredWaitsForFlush(t *testing.T) {
	f, s, done := parkedSession(t)
	d := Deferral{maxWait: time.Hour} // only the flush wakes
	for off := range int64(3) {
		if !s.SendDeferred(msg(1, off, 0, DropOld), &d) {
			t.Fatalf("item %d not queued", off)
		}
	}
	if st := s.writer.Load(); st != writerParked {
		t.Fatalf("writer state %d after deferred sends, want parked", st)
	}
	if n := s.q.Len(); n != 3 {
		t.Fatalf("queued %d, want 3", n)
	}
	d.Flush()
	waitFor(t, "the three frames", func() bool { return len(f.frames()) == 3 })
	f.mu.Lock()
	writes := len(f.writes)
	f.mu.Unlock()
	if writes != 1 {
		t.Fatalf("%d writes for one flush, want 1", writes)
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-done
}

// TestDeferralListsSessionOnce: a session waiting for one Deferral's flush
// is not listed by another; its items go out with the first flush, after
// which the other lists it again.
func TestDeferralListsSessionOnce(t *testing.T) {
	f, s, done := parkedSession(t)
	d1, d2 := Deferral{maxWait: time.Hour}, Deferral{maxWait: time.Hour}
	s.SendDeferred(msg(1, 0, 0, DropOld), &d1)
	s.SendDeferred(msg(1, 1, 0, DropOld), &d2)
	if d2.pending != nil {
		t.Fatalf("listed by the second deferral too")
	}
	d2.Flush() // nothing of its own
	if st := s.writer.Load(); st != writerParked {
		t.Fatalf("writer state %d after the other deferral's flush, want parked", st)
	}
	d1.Flush()
	waitFor(t, "both frames", func() bool { return len(f.frames()) == 2 })
	waitFor(t, "the writer to park", parked(s))
	s.SendDeferred(msg(1, 2, 0, DropOld), &d2)
	if d2.pending == nil || len(*d2.pending) != 1 {
		t.Fatalf("not listed by the second deferral after the flush")
	}
	d2.Flush()
	waitFor(t, "the third frame", func() bool { return len(f.frames()) == 3 })
	if got := strings.Join(f.frames(), " "); got != "m1:0 m1:1 m1:2" {
		t.Fatalf("frames %q", got)
	}
	s.Close(websocket.StatusNormalClosure, "")
	<-done
}

// TestSendDeferredOverflowClosesAtOnce: an item past the Disconnect bound
// closes the session without waiting for a flush.
func TestSendDeferredOverflowClosesAtOnce(t *testing.T) {
	f := newFakeSocket()
	s := newSession("s", Options{EncodeGap: testGap, QueueMessages: 1}, f.socket())
	var d Deferral
	s.SendDeferred(msg(1, 0, 0, Disconnect), &d)
	if s.SendDeferred(msg(1, 1, 0, Disconnect), &d) {
		t.Fatal("item past the bound queued")
	}
	select {
	case <-s.Closing():
	default:
		t.Fatal("the overflow did not close the session")
	}
	d.Flush()
}

// fanOutPair accepts two sessions on one server: the publisher, whose
// handler sends every frame it reads to the subscriber through the
// publisher's own Deferral (which only its reader flushes: the bound is
// an hour), and the subscriber. The publisher's client is
// a raw TCP connection (so that several frames can share a segment), the
// subscriber's a websocket.Conn.
func fanOutPair(t *testing.T) (pub net.Conn, sub *websocket.Conn) {
	t.Helper()
	subSess := make(chan *Session, 1)
	ready := make(chan *Session, 1) // the subscriber, for the publisher
	pubDone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, nil, r.URL.Path, Options{EncodeGap: testGap, MaxDeferredWake: time.Hour})
		if err != nil {
			t.Error(err)
			return
		}
		if r.URL.Path == "/sub" {
			subSess <- s
			ready <- s
			_ = s.Run(context.Background(), handlerFunc(func(*Session, []byte) {}))
			return
		}
		defer close(pubDone)
		target := <-ready
		var off int64
		_ = s.Run(context.Background(), handlerFunc(func(p *Session, data []byte) {
			it := msg(1, off, 0, DropOld)
			it.Frame = []byte("m:" + string(data))
			off++
			target.SendDeferred(it, p.Deferral())
		}))
	}))
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/sub", nil)
	if err != nil {
		t.Fatal(err)
	}
	ss := <-subSess
	pub = rawDial(t, strings.TrimPrefix(srv.URL, "http://"), "/pub")
	t.Cleanup(func() {
		_ = pub.Close()
		_ = sub.CloseNow()
		<-pubDone
		<-ss.Done()
	})
	return pub, sub
}

// rawDial opens a WebSocket connection to path at addr by hand and returns
// the TCP connection once the upgrade is answered; the caller writes
// frames (maskedText) itself.
func rawDial(t testing.TB, addr, path string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := "GET " + path + " HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade reply %d", resp.StatusCode)
	}
	return c // the server writes nothing to the publisher, so the reader buffered nothing
}

// TestReaderFlushesPerRead: the frames of one read of the publisher's
// socket reach the subscriber as one batch, woken when the reader is about
// to wait for more; the next read's frames follow in another.
func TestReaderFlushesPerRead(t *testing.T) {
	pub, sub := fanOutPair(t)
	// Three frames in one segment: one read.
	if _, err := pub.Write(append(append(maskedText("a"), maskedText("b")...), maskedText("c")...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, data, err := sub.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(data) != "m:a\nm:b\nm:c" {
		t.Fatalf("first batch %q, want the three frames of the read", data)
	}
	if _, err := pub.Write(maskedText("d")); err != nil {
		t.Fatal(err)
	}
	if _, data, err = sub.Read(ctx); err != nil || string(data) != "m:d" {
		t.Fatalf("second batch %q (%v)", data, err)
	}
}

// TestRunFlushesWhenReaderEnds: a text frame and, in the same read, a
// binary frame that ends the session: what the text frame fanned out
// reaches its subscriber although the publisher's reader never reads its
// socket for itself again. Two flushes deliver it: the reader's own when
// it ends, and the one before the close handshake's read of the socket
// (on the writer); either alone passes, none fails.
func TestRunFlushesWhenReaderEnds(t *testing.T) {
	pub, sub := fanOutPair(t)
	bin := maskedText("x")
	bin[0] = 0x82 // binary
	// 14 bytes in all: the library's 16-byte reader takes both frames in
	// its first read, so no later read of the socket flushes for it.
	if _, err := pub.Write(append(maskedText("a"), bin...)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, data, err := sub.Read(ctx); err != nil || string(data) != "m:a" {
		t.Fatalf("read %q (%v)", data, err)
	}
}

// TestAppendTextHeader: the three length encodings of RFC 6455, 5.2.
func TestAppendTextHeader(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want []byte
	}{
		{0, []byte{0x81, 0}},
		{125, []byte{0x81, 125}},
		{126, []byte{0x81, 126, 0, 126}},
		{0xffff, []byte{0x81, 126, 0xff, 0xff}},
		{0x10000, []byte{0x81, 127, 0, 0, 0, 0, 0, 1, 0, 0}},
	} {
		if got := appendTextHeader(nil, tc.n); string(got) != string(tc.want) {
			t.Errorf("%d bytes: header % x, want % x", tc.n, got, tc.want)
		}
	}
}

// TestWriteTextAfterClose: once the library has written a close frame, the
// session's own text frames are refused, so that none follows it.
func TestWriteTextAfterClose(t *testing.T) {
	client, server := tcpPair(t)
	lw := &lazyWriter{nc: server}
	if err := lw.writeText([][]byte{nil, []byte("hi")}, 2); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Write([]byte{0x89, 0}); err != nil { // a ping: not a close
		t.Fatal(err)
	}
	if err := lw.writeText([][]byte{nil, []byte("x")}, 1); err != nil {
		t.Fatalf("after a ping: %v", err)
	}
	if _, err := lw.Write([]byte{0x88, 2, 0x03, 0xe8}); err != nil {
		t.Fatal(err)
	}
	if err := lw.writeText([][]byte{nil, []byte("late")}, 4); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("after the close frame: %v, want net.ErrClosed", err)
	}
	want := []byte{0x81, 2, 'h', 'i', 0x89, 0, 0x81, 1, 'x', 0x88, 2, 0x03, 0xe8}
	got := make([]byte, len(want))
	if err := client.SetReadDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Fatalf("wire % x, want % x", got, want)
	}
}

// TestNewSessionFlushesPerFrame: a session over a connection it does not
// read itself (New) flushes its Deferral after each frame.
func TestNewSessionFlushesPerFrame(t *testing.T) {
	f := newFakeSocket()
	target := newSession("target", Options{EncodeGap: testGap}, f.socket())
	targetDone := startWriter(target)
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		c, err := websocket.Accept(w, r, nil)
		if err != nil {
			t.Error(err)
			return
		}
		s := New(c, "pub", Options{EncodeGap: testGap, MaxDeferredWake: time.Hour})
		var off int64
		_ = s.Run(context.Background(), handlerFunc(func(p *Session, data []byte) {
			it := msg(1, off, 0, DropOld)
			off++
			target.SendDeferred(it, p.Deferral())
		}))
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := c.Write(ctx, websocket.MessageText, []byte("x")); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the frame's message", func() bool { return len(f.frames()) == i+1 })
	}
	c.Close(websocket.StatusNormalClosure, "")
	<-done
	target.Close(websocket.StatusNormalClosure, "")
	<-targetDone
}
