package session

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// echo sends every inbound frame back as a control frame.
type echo struct{}

func (echo) HandleFrame(s *Session, data []byte) {
	s.Send(Item{Frame: append([]byte("c:"), data...)})
}

// served is a session running behind a loopback server and its client.
type served struct {
	sess   *Session
	client *websocket.Conn
	runErr chan error
}

// serve starts a server whose handler accepts one session with opts, calls
// before (if set) before Run, and runs it with h; it dials it and returns
// both ends. Cleanup closes the client and waits for the session.
func serve(t *testing.T, opts Options, h Handler, before func(*Session)) *served {
	t.Helper()
	return serveDial(t, opts, h, before, nil)
}

// serveDial is serve with the client's dial options.
func serveDial(t *testing.T, opts Options, h Handler, before func(*Session), dialOpts *websocket.DialOptions) *served {
	t.Helper()
	if opts.EncodeGap == nil {
		opts.EncodeGap = testGap
	}
	sv := &served{runErr: make(chan error, 1)}
	sessions := make(chan *Session, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, nil, "s1", opts)
		if err != nil {
			t.Error(err)
			return
		}
		if before != nil {
			before(s)
		}
		sessions <- s
		sv.runErr <- s.Run(context.Background(), h)
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http"), dialOpts)
	if err != nil {
		srv.Close()
		t.Fatal(err)
	}
	sv.client = c
	sv.sess = <-sessions
	t.Cleanup(func() {
		_ = c.CloseNow()
		<-sv.sess.Done()
		srv.Close()
	})
	return sv
}

// readFrames reads text frames until n objects have arrived.
func readFrames(t *testing.T, c *websocket.Conn, n int) []string {
	t.Helper()
	var out []string
	for len(out) < n {
		typ, p, err := c.Read(context.Background())
		if err != nil {
			t.Fatalf("after %d objects: %v", len(out), err)
		}
		if typ != websocket.MessageText {
			t.Fatalf("frame type %v", typ)
		}
		out = append(out, strings.Split(string(p), "\n")...)
	}
	return out
}

// closeStatus reads until the connection ends and returns its close status.
func closeStatus(c *websocket.Conn) websocket.StatusCode {
	for {
		if _, _, err := c.Read(context.Background()); err != nil {
			return websocket.CloseStatus(err)
		}
	}
}

func TestSessionFramesReachClient(t *testing.T) {
	sv := serve(t, Options{}, echo{}, nil)
	ctx := context.Background()
	if err := sv.client.Write(ctx, websocket.MessageText, []byte(`{"op":"ping"}`)); err != nil {
		t.Fatal(err)
	}
	if got := readFrames(t, sv.client, 1); got[0] != `c:{"op":"ping"}` {
		t.Fatalf("echo %q", got)
	}
	for i := range 5 {
		sv.sess.Send(msg(1, int64(i), 1, DropOld))
	}
	got := readFrames(t, sv.client, 5)
	if strings.Join(got, ",") != "m1:0,m1:1,m1:2,m1:3,m1:4" {
		t.Fatalf("frames %q", got)
	}
	if sv.sess.ID() != "s1" {
		t.Errorf("ID %q", sv.sess.ID())
	}
	sv.client.Close(websocket.StatusNormalClosure, "")
	if err := <-sv.runErr; err != nil {
		t.Errorf("Run after a normal close: %v", err)
	}
	st := sv.sess.Stats()
	if st.Sent != 6 || st.BytesIn != uint64(len(`{"op":"ping"}`)) || st.BytesOut == 0 {
		t.Errorf("stats %+v", st)
	}
}

func TestSessionBadFrames(t *testing.T) {
	tests := []struct {
		name    string
		typ     websocket.MessageType
		data    string
		want    websocket.StatusCode
		wantErr error
	}{
		{"binary frame", websocket.MessageBinary, `{"op":"x"}`, websocket.StatusUnsupportedData, ErrBinaryFrame},
		{"invalid UTF-8", websocket.MessageText, "{\"op\":\"\xff\xfe\"}", websocket.StatusInvalidFramePayloadData, ErrInvalidUTF8},
		{"over the read limit", websocket.MessageText, `{"op":"` + strings.Repeat("x", 64) + `"}`, websocket.StatusMessageTooBig, websocket.ErrMessageTooBig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sv := serve(t, Options{ReadLimit: 32}, echo{}, nil)
			if err := sv.client.Write(context.Background(), tt.typ, []byte(tt.data)); err != nil {
				t.Fatal(err)
			}
			if got := closeStatus(sv.client); got != tt.want {
				t.Errorf("close status %v, want %v", got, tt.want)
			}
			if err := <-sv.runErr; !errors.Is(err, tt.wantErr) {
				t.Errorf("Run = %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestSessionDisconnectPolicy(t *testing.T) {
	sv := serve(t, Options{QueueMessages: 2}, echo{}, func(s *Session) {
		// Before Run the writer is not draining: the queue fills.
		s.Send(msg(1, 0, 0, Disconnect))
		s.Send(msg(1, 1, 0, Disconnect))
		if s.Send(msg(1, 2, 0, Disconnect)) {
			t.Error("Send over the bound queued")
		}
	})
	if got := closeStatus(sv.client); got != websocket.StatusTryAgainLater {
		t.Errorf("close status %v, want 1013", got)
	}
	if err := <-sv.runErr; !errors.Is(err, ErrSlowConsumer) {
		t.Errorf("Run = %v", err)
	}
}

func TestSessionCloseFlushes(t *testing.T) {
	const n = 50
	sv := serve(t, Options{MaxBatchBytes: 64}, echo{}, func(s *Session) {
		for i := range n {
			s.Send(msg(1, int64(i), 0, DropOld))
		}
		s.Close(websocket.StatusGoingAway, "shutting down")
		if s.Send(msg(1, n, 0, DropOld)) {
			t.Error("Send after Close queued")
		}
	})
	got := readFrames(t, sv.client, n)
	for i, f := range got {
		if want := msg(1, int64(i), 0, DropOld).Frame; f != string(want) {
			t.Fatalf("frame %d = %q, want %q", i, f, want)
		}
	}
	if got := closeStatus(sv.client); got != websocket.StatusGoingAway {
		t.Errorf("close status %v, want 1001", got)
	}
	if err := <-sv.runErr; err != nil {
		t.Errorf("Run = %v", err)
	}
	if st := sv.sess.Stats(); st.Writes >= n || st.Sent != n {
		t.Errorf("stats %+v: want %d objects in fewer writes", st, n)
	}
}

// TestSessionNonReadingClient checks that a client that never reads does not
// block Send: 64 MiB is far more than the socket buffers hold, so the writer
// blocks, and the queue drops and counts instead.
func TestSessionNonReadingClient(t *testing.T) {
	sv := serve(t, Options{QueueMessages: 64}, echo{}, nil)
	frame := []byte(strings.Repeat("x", 16<<10))
	const n = 4096
	var slowest time.Duration
	for i := range n {
		start := time.Now()
		sv.sess.Send(Item{Frame: frame, Stream: Stream{Sub: 1, Topic: "t"}, Offset: int64(i)})
		slowest = max(slowest, time.Since(start))
	}
	st := sv.sess.Stats()
	if st.Dropped == 0 || st.Queued > 64 {
		t.Errorf("stats %+v: want drops and at most 64 queued", st)
	}
	if slowest > time.Second {
		t.Errorf("slowest Send took %v", slowest)
	}
	_ = sv.client.CloseNow()
	<-sv.runErr
}

func TestSessionKeepalive(t *testing.T) {
	t.Run("pong keeps the session", func(t *testing.T) {
		threePings := make(chan struct{})
		var n atomic.Int32
		dialOpts := &websocket.DialOptions{
			OnPingReceived: func(context.Context, []byte) bool {
				if n.Add(1) == 3 {
					close(threePings)
				}
				return true
			},
		}
		sv := serveDial(t, Options{PingInterval: time.Millisecond}, echo{}, nil, dialOpts)
		// The client answers pings while it reads.
		readerDone := make(chan websocket.StatusCode)
		go func() { readerDone <- closeStatus(sv.client) }()
		<-threePings
		select {
		case <-sv.sess.Done():
			t.Fatal("session ended although the client answers pings")
		default:
		}
		sv.sess.Close(websocket.StatusNormalClosure, "")
		if got := <-readerDone; got != websocket.StatusNormalClosure {
			t.Errorf("close status %v", got)
		}
		if err := <-sv.runErr; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
	t.Run("no pong ends the session", func(t *testing.T) {
		// The client never reads, so it never answers a ping.
		sv := serve(t, Options{PingInterval: time.Millisecond, PongTimeout: 10 * time.Millisecond}, echo{}, nil)
		err := <-sv.runErr
		if err == nil || !strings.Contains(err.Error(), "keepalive") {
			t.Errorf("Run = %v, want a keepalive error", err)
		}
	})
}

func TestSessionContextCancelCloses(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	srvErr := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s, err := Accept(w, r, nil, "s", Options{EncodeGap: testGap})
		if err != nil {
			srvErr <- err
			return
		}
		srvErr <- s.Run(ctx, echo{})
	}))
	defer srv.Close()
	c, _, err := websocket.Dial(context.Background(), "ws"+strings.TrimPrefix(srv.URL, "http"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	cancel()
	if got := closeStatus(c); got != websocket.StatusGoingAway {
		t.Errorf("close status %v, want 1001", got)
	}
	if err := <-srvErr; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestSessionRunTwice(t *testing.T) {
	sv := serve(t, Options{}, echo{}, nil)
	// The server's Run and this one race to start: whichever comes second
	// must return ErrRunTwice at once; the other runs the session.
	mine := make(chan error, 1)
	go func() { mine <- sv.sess.Run(context.Background(), echo{}) }()
	var first error
	select {
	case first = <-mine:
	case first = <-sv.runErr:
	case <-time.After(10 * time.Second):
		t.Fatal("neither Run returned")
	}
	if !errors.Is(first, ErrRunTwice) {
		t.Errorf("the second Run returned %v, want ErrRunTwice", first)
	}
	_ = sv.client.CloseNow()
	<-sv.sess.Done()
}
