package session

import (
	"bufio"
	"context"
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// rawClient is a client that speaks WebSocket frames by hand over a plain
// TCP connection: it answers nothing unless told to, and starts no
// goroutine of its own.
type rawClient struct {
	net.Conn
	br *bufio.Reader // holds what the upgrade reply's reading read ahead
}

// rawSession is a session accepted by Accept behind a loopback server,
// run with Start, and its raw client.
type rawSession struct {
	sess   *Session
	client *rawClient
	runErr chan error // what Run would return, once the session has ended
	// extensions is the Sec-WebSocket-Extensions header of the upgrade reply.
	extensions string
}

// rawServe accepts one session with opts, runs it with h and dials it with
// a raw client. Cleanup closes the client and waits for the session.
func rawServe(t testing.TB, opts Options, h Handler) *rawSession {
	t.Helper()
	return rawServeMode(t, false, opts, h)
}

// rawServeMode is rawServe with permessage-deflate negotiated when
// compressed is set (the raw client's own frames stay uncompressed).
func rawServeMode(t testing.TB, compressed bool, opts Options, h Handler) *rawSession {
	t.Helper()
	var ao *websocket.AcceptOptions
	ext := ""
	if compressed {
		ao = &websocket.AcceptOptions{CompressionMode: websocket.CompressionNoContextTakeover}
		ext = "Sec-WebSocket-Extensions: permessage-deflate; client_no_context_takeover; server_no_context_takeover\r\n"
	}
	rs := rawServeAccept(t, ao, ext, opts, h)
	if got := strings.Contains(rs.extensions, "permessage-deflate"); got != compressed {
		t.Fatalf("compression negotiated: %v, want %v", got, compressed)
	}
	return rs
}

// rawServeAccept is rawServe with the AcceptOptions ao, and the header
// lines ext (each ending in CRLF) added to the client's upgrade request.
func rawServeAccept(t testing.TB, ao *websocket.AcceptOptions, ext string, opts Options, h Handler) *rawSession {
	t.Helper()
	if opts.EncodeGap == nil {
		opts.EncodeGap = testGap
	}
	rs := &rawSession{runErr: make(chan error, 1)}
	sessions := make(chan *Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, ao, "raw", opts)
		if err != nil {
			t.Error(err)
			close(sessions)
			return
		}
		if err := s.Start(context.Background(), h, func(err error) { rs.runErr <- err }); err != nil {
			t.Error(err)
		}
		sessions <- s
	}))
	t.Cleanup(srv.Close)
	c, err := net.Dial("tcp", strings.TrimPrefix(srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	key := base64.StdEncoding.EncodeToString([]byte("0123456789abcdef"))
	req := "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + "\r\n" + ext + "\r\n"
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatal(err)
	}
	rs.client = &rawClient{Conn: c, br: bufio.NewReader(c)}
	resp, err := http.ReadResponse(rs.client.br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade reply %d", resp.StatusCode)
	}
	rs.extensions = resp.Header.Get("Sec-WebSocket-Extensions")
	rs.sess = <-sessions
	if rs.sess == nil {
		t.FailNow()
	}
	t.Cleanup(func() {
		_ = c.Close()
		<-rs.sess.Done()
	})
	return rs
}

// Read reads through what the upgrade reply's reading buffered.
func (c *rawClient) Read(p []byte) (int, error) { return c.br.Read(p) }

// readFrame reads one short unmasked frame of the server (payload under
// 126 bytes), waiting at most 10 seconds, and returns its first byte and
// payload.
func (c *rawClient) readFrame(t *testing.T) (byte, []byte) {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.SetReadDeadline(time.Time{})
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		t.Fatalf("reading a frame of the server: %v", err)
	}
	if hdr[1] > 125 {
		t.Fatalf("frame header % x: want a short unmasked frame", hdr)
	}
	p := make([]byte, hdr[1])
	if _, err := io.ReadFull(c, p); err != nil {
		t.Fatalf("reading a frame of the server: %v", err)
	}
	return hdr[0], p
}

// maskedFrame encodes a short client frame (payload under 126 bytes) with
// first byte b0 (FIN and opcode).
func maskedFrame(b0 byte, payload string) []byte {
	f := maskedText(payload)
	f[0] = b0
	return f
}

// waitEnded waits up to bound for the session to end and returns what Run
// returned; it fails the test if the session is still running then.
func (rs *rawSession) waitEnded(t *testing.T, bound time.Duration, what string) error {
	t.Helper()
	start := time.Now()
	select {
	case err := <-rs.runErr:
		t.Logf("%s: the session ended after %v", what, time.Since(start).Round(time.Millisecond))
		return err
	case <-time.After(bound):
		t.Fatalf("%s: the session still runs after %v", what, bound)
		return nil
	}
}
