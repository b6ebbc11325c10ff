package session

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// sessionGoroutines counts the goroutines that run code of a Session (its
// reader, a burst of it, its writer, a keepalive ping), and returns their
// stacks for a failure message.
func sessionGoroutines() (int, string) {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var mine []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "session.(*Session).") || strings.Contains(g, "session.idleWait.") {
			mine = append(mine, g)
		}
	}
	return len(mine), strings.Join(mine, "\n\n")
}

// TestIdleAfterBurstOneGoroutine: once a burst of input has been handled,
// an idle session is back to one goroutine, its reader waiting for the
// socket, or none where the reader parks in the idle poller
// (idleReaders): also when the burst was a client's ping, which the session
// answers, or a data frame with a pong or a ping behind it in one read.
// Before, a ping, or a control frame read behind a data frame, left the
// burst's goroutine waiting inside the library's frame reader for the next
// frame: two goroutines, one with a deep stack, per such client.
func TestIdleAfterBurstOneGoroutine(t *testing.T) {
	ping := maskedFrame(0x80|opPing, "p1")
	pong := maskedFrame(0x80|opPong, "sy")
	text := maskedText("hi")
	for _, tc := range []struct {
		name    string
		send    []byte
		frames  int  // text frames handled per session
		pongs   bool // the session takes a pong
		answers bool // the client gets a pong back
	}{
		{"client ping", ping, 0, false, true},
		{"pong behind a data frame", append(append([]byte{}, text...), pong...), 1, true, false},
		{"ping behind a data frame", append(append([]byte{}, text...), ping...), 1, false, true},
		{"two pings and a pong", append(append(append([]byte{}, ping...), ping...), pong...), 0, true, true},
	} {
		for _, compressed := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, compressed=%v", tc.name, compressed), func(t *testing.T) {
				const n = 16
				var handled atomic.Int64
				h := handlerFunc(func(*Session, []byte) { handled.Add(1) })
				conns := make([]*rawClient, n)
				list := make([]*Session, n)
				for i := range conns {
					rs := rawServeMode(t, compressed, Options{}, h)
					conns[i], list[i] = rs.client, rs.sess
				}
				waitFor(t, "every session idle", func() bool { g, _ := sessionGoroutines(); return g == idleReaders(n) })
				for _, c := range conns {
					if _, err := c.Write(tc.send); err != nil {
						t.Fatal(err)
					}
				}
				if tc.answers {
					want := []byte{0x80 | opPong, 2, 'p', '1'}
					for i, c := range conns {
						got := make([]byte, len(want))
						_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
						if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
							t.Fatalf("client %d: the answer to its ping is % x (%v), want % x", i, got, err, want)
						}
					}
				}
				waitFor(t, "every frame handled", func() bool { return handled.Load() == int64(tc.frames*n) })
				if tc.pongs {
					waitFor(t, "every pong taken", func() bool {
						for _, s := range list {
							if len(s.idle.pongs) == 0 {
								return false
							}
						}
						return true
					})
				}
				deadline := time.Now().Add(10 * time.Second)
				for {
					g, stacks := sessionGoroutines()
					if g == idleReaders(n) {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("%d idle sessions run %d goroutines, want %d:\n%s", n, g, idleReaders(n), stacks)
					}
					time.Sleep(time.Millisecond)
				}
			})
		}
	}
}
