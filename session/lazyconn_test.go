package session

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/base64"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

// TestLazyReaderHoldsBufferOnlyWhileBytesPending: a read borrows a pooled
// buffer only while bytes it read are unread; a large read goes straight
// into the caller's slice; EOF and a closed socket end the reads.
func TestLazyReaderHoldsBufferOnlyWhileBytesPending(t *testing.T) {
	client, server := tcpPair(t)
	rc, err := server.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	lr := &lazyReader{rc: rc}
	if _, err := client.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 4)
	var got []byte
	for len(got) < 10 {
		n, err := lr.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p[:n]...)
		if held := lr.buf != nil; held != (len(got) < 10) {
			t.Fatalf("after %d of 10 bytes: buffer held %v", len(got), held)
		}
	}
	if string(got) != "0123456789" {
		t.Fatalf("read %q", got)
	}

	big := bytes.Repeat([]byte("x"), 8<<10)
	go client.Write(big)
	large := make([]byte, 8<<10)
	if _, err := io.ReadFull(lr, large); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(large, big) || lr.buf != nil {
		t.Fatalf("large read: equal %v, buffer held %v", bytes.Equal(large, big), lr.buf != nil)
	}

	client.Close()
	if _, err := lr.Read(p); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}

// TestLazyReaderUnblocksOnClose: a read waiting for data returns once the
// connection is closed locally (as the writer does to end a session).
func TestLazyReaderUnblocksOnClose(t *testing.T) {
	_, server := tcpPair(t)
	rc, _ := server.(*net.TCPConn).SyscallConn()
	lr := &lazyReader{rc: rc}
	errc := make(chan error, 1)
	go func() {
		_, err := lr.Read(make([]byte, 16))
		errc <- err
	}()
	time.Sleep(10 * time.Millisecond) // let the read wait; a closed socket is refused at once too
	server.Close()
	select {
	case err := <-errc:
		if !strings.Contains(err.Error(), "closed") {
			t.Fatalf("read on a closed connection: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read did not return after close")
	}
}

// TestLazyWriterCork: while corked, pieces of the batch's own slice are
// referenced and other pieces copied, and uncork writes them all in order;
// uncorked writes go straight through.
func TestLazyWriterCork(t *testing.T) {
	client, server := tcpPair(t)
	lw := &lazyWriter{nc: server}
	own := []byte("HEADERpayload-of-the-batch")
	lw.cork(own)
	steps := [][]byte{[]byte("hd"), own[:6], own[6:], []byte("PONG")}
	for _, p := range steps {
		if n, err := lw.Write(p); err != nil || n != len(p) {
			t.Fatalf("corked write: %d, %v", n, err)
		}
	}
	if len(lw.segs) != 3 || lw.segs[1].ref == nil {
		t.Fatalf("segments %+v: want copied, referenced, copied", lw.segs)
	}
	if err := lw.uncork(); err != nil {
		t.Fatal(err)
	}
	if _, err := lw.Write([]byte("|after")); err != nil {
		t.Fatal(err)
	}
	want := "hdHEADERpayload-of-the-batchPONG|after"
	got := make([]byte, len(want))
	client.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(client, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Fatalf("peer read %q, want %q", got, want)
	}
	if lw.copied != nil {
		t.Fatal("uncork kept the copy buffer")
	}
}

// TestSessionFramesBeforeUpgradeReply: frames the client sends right behind
// its upgrade request, before the 101 reply (so that net/http has read them
// into its buffer), reach the handler in order; so do frames that arrive
// together later.
func TestSessionFramesBeforeUpgradeReply(t *testing.T) {
	got := make(chan string, 4)
	h := handlerFunc(func(_ *Session, data []byte) { got <- string(data) })
	done := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(done)
		s, err := Accept(w, r, nil, "s1", Options{EncodeGap: testGap})
		if err != nil {
			t.Error(err)
			return
		}
		_ = s.Run(context.Background(), h)
	}))
	defer srv.Close()
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n\r\n"
	msg := append([]byte(req), maskedText("first")...)
	msg = append(msg, maskedText("second")...)
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Sec-WebSocket-Accept") != base64.StdEncoding.EncodeToString(sum[:]) {
		t.Fatalf("upgrade reply %d %v", resp.StatusCode, resp.Header)
	}
	handled := func(frames ...string) {
		t.Helper()
		for _, want := range frames {
			select {
			case f := <-got:
				if f != want {
					t.Fatalf("frame %q, want %q", f, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("frame %q not handled", want)
			}
		}
	}
	handled("first", "second")
	// Two tiny frames in one segment: the second one waits in the
	// library's small bufio.Reader while the first is handled, and must
	// not wait for the socket to become readable again.
	if _, err := c.Write(append(maskedText("x"), maskedText("y")...)); err != nil {
		t.Fatal(err)
	}
	handled("x", "y")
	c.Close()
	<-done
}

// maskedText encodes a short client text frame (payload under 126 bytes).
func maskedText(s string) []byte {
	key := [4]byte{1, 2, 3, 4}
	out := []byte{0x81, 0x80 | byte(len(s)), key[0], key[1], key[2], key[3]}
	for i := range len(s) {
		out = append(out, s[i]^key[i%4])
	}
	return out
}

// TestSessionLargeAndCompressedBatches: batches far over the small bufio
// writer, plain and compressed, reach the client intact.
func TestSessionLargeAndCompressedBatches(t *testing.T) {
	for _, mode := range []websocket.CompressionMode{websocket.CompressionDisabled, websocket.CompressionNoContextTakeover} {
		t.Run(map[websocket.CompressionMode]string{websocket.CompressionDisabled: "plain", websocket.CompressionNoContextTakeover: "compressed"}[mode], func(t *testing.T) {
			done := make(chan struct{})
			// The last frame compresses badly: its compressed payload is
			// larger than the small write buffer.
			rnd := rand.New(rand.NewPCG(1, 2))
			noise := make([]byte, 10<<10)
			for i := range noise {
				noise[i] = byte('a' + rnd.IntN(26))
			}
			frames := []string{strings.Repeat("a", 300), strings.Repeat("b", 70<<10), "c", strings.Repeat("d", 5000), string(noise)}
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				defer close(done)
				s, err := Accept(w, r, &websocket.AcceptOptions{CompressionMode: mode}, "s1", Options{EncodeGap: testGap, ReadLimit: 1 << 20})
				if err != nil {
					t.Error(err)
					return
				}
				for _, f := range frames {
					s.Send(Item{Frame: []byte(f)})
				}
				_ = s.Run(context.Background(), handlerFunc(func(*Session, []byte) {}))
			}))
			defer srv.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), &websocket.DialOptions{CompressionMode: mode})
			if err != nil {
				t.Fatal(err)
			}
			defer c.CloseNow()
			c.SetReadLimit(1 << 20)
			var got []string
			for len(got) < len(frames) {
				_, data, err := c.Read(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, strings.Split(string(data), "\n")...)
			}
			for i := range frames {
				if got[i] != frames[i] {
					t.Fatalf("frame %d: %d bytes, want %d", i, len(got[i]), len(frames[i]))
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
			<-done
		})
	}
}
