package router_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/internal/wire/golden"
	"github.com/switchyard/switchyard/router"
)

var updateGolden = flag.Bool("update", false, "rewrite the golden transcripts' server frames with what the gateway sends")

// TestGoldenTranscripts drives a gateway over WebSocket with the client
// frames of every golden transcript (internal/wire/testdata) and checks
// that it answers with exactly the server frames written there, byte for
// byte. The Go client, the command-line client, the load generator and
// the JS client read the same frames in their own tests.
func TestGoldenTranscripts(t *testing.T) {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range all {
		if len(tr.Steps) == 0 {
			continue
		}
		t.Run(tr.Name, func(t *testing.T) { runGolden(t, tr) })
	}
}

// goldenGateway applies a transcript's "gateway:" options.
func goldenGateway(t *testing.T, opts map[string]string) func(*gwConfig) {
	return func(cfg *gwConfig) {
		cfg.engine.Clock = enginetest.NewFakeClock(golden.Time)
		for k, v := range opts {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil && k != "strict" && k != "auth" {
				t.Fatalf("gateway option %s=%s: %v", k, v, err)
			}
			switch k {
			case "max_subscriptions":
				cfg.router.MaxSubscriptions = int(n)
			case "max_message_bytes":
				cfg.router.MaxMessageBytes = int(n)
			case "publish_rate":
				cfg.router.PublishRate = n
			case "publish_burst":
				cfg.router.PublishBurst = int(n)
			case "max_messages":
				cfg.engine.Defaults.MaxMessages = int64(n)
			case "strict":
				cfg.engine.Strict = v == "true"
			case "auth": // anonymous: tokens are checked; without one a session may subscribe to v.#
				cfg.router.Auth = router.AuthOptions{
					HMACSecrets: [][]byte{[]byte("golden-transcripts-secret-0123456789")},
					Anonymous:   &router.Grants{Subscribe: []string{v + ".#"}},
				}
			default:
				t.Fatalf("unknown gateway option %s", k)
			}
		}
	}
}

// goldenSession is one WebSocket of a transcript; lines receives every
// frame it reads, split on newlines.
type goldenSession struct {
	conn  *websocket.Conn
	id    string
	lines chan []byte
	stop  chan struct{} // closed at the test's end: the reader gives up sending
	done  chan struct{}
}

func runGolden(t *testing.T, tr *golden.Transcript) {
	g := newGateway(t, goldenGateway(t, tr.Gateway))
	epoch := ""
	sessions := map[string]*goldenSession{}
	var order []string
	vars := func() *strings.Replacer { // actual value → variable
		pairs := []string{}
		for _, name := range order {
			pairs = append(pairs, sessions[name].id, "$SESSION_"+name)
		}
		return strings.NewReplacer(append(pairs, epoch, "$EPOCH")...)
	}
	open := func(name string) *goldenSession {
		if s := sessions[name]; s != nil {
			return s
		}
		s := dialGolden(t, g.wsURL(), tr.Query[name])
		welcome := s.next(t)
		var w struct{ Op, Session, Epoch string }
		if err := json.Unmarshal(welcome, &w); err != nil || w.Op != "welcome" {
			t.Fatalf("session %s: first frame %s", name, welcome)
		}
		s.id, epoch = w.Session, w.Epoch
		sessions[name] = s
		order = append(order, name)
		return s
	}
	for _, st := range tr.Steps {
		s := open(st.Session)
		if st.Send {
			frame := strings.ReplaceAll(st.Frame, "$EPOCH", epoch)
			for _, name := range order {
				frame = strings.ReplaceAll(frame, "$SESSION_"+name, sessions[name].id)
			}
			s.write(t, frame)
			continue
		}
		got := vars().Replace(string(s.next(t)))
		if got == st.Frame {
			continue
		}
		if *updateGolden {
			if err := golden.Rewrite(tr.Path, st.Line, got); err != nil {
				t.Fatal(err)
			}
			continue
		}
		t.Fatalf("%s:%d: session %s received\n\t%s\nwant\n\t%s", tr.Path, st.Line, st.Session, got, st.Frame)
	}
	// Nothing else may arrive: the next frame of every session is the
	// reply to a ping.
	for _, name := range order {
		s := sessions[name]
		s.write(t, `{"op":"ping","id":"golden-end"}`)
		if got := vars().Replace(string(s.next(t))); got != `{"op":"pong","id":"golden-end"}` {
			t.Fatalf("%s: session %s received %s after the transcript's last frame", tr.Path, name, got)
		}
	}
}

func dialGolden(t *testing.T, wsURL, query string) *goldenSession {
	t.Helper()
	if query != "" {
		if _, err := url.ParseQuery(query); err != nil {
			t.Fatal(err)
		}
		wsURL += "?" + query
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	conn, _, err := websocket.Dial(ctx, wsURL, nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	s := &goldenSession{conn: conn, lines: make(chan []byte, 1024), stop: make(chan struct{}), done: make(chan struct{})}
	send := func(l []byte) bool {
		select {
		case s.lines <- l:
			return true
		case <-s.stop:
			return false
		}
	}
	go func() {
		defer close(s.done)
		for {
			typ, data, err := conn.Read(context.Background())
			if err != nil {
				return
			}
			if typ != websocket.MessageText {
				if !send([]byte(fmt.Sprintf("<binary message %q>", data))) {
					return
				}
				continue
			}
			for _, l := range bytes.Split(data, []byte("\n")) {
				if !send(l) {
					return
				}
			}
		}
	}()
	t.Cleanup(func() {
		close(s.stop)
		conn.Close(websocket.StatusNormalClosure, "")
		<-s.done
	})
	return s
}

func (s *goldenSession) write(t *testing.T, frame string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := s.conn.Write(ctx, websocket.MessageText, []byte(frame)); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func (s *goldenSession) next(t *testing.T) []byte {
	t.Helper()
	select {
	case l := <-s.lines:
		return l
	case <-time.After(waitTimeout):
		t.Fatalf("no frame within %v", waitTimeout)
		return nil
	}
}
