package session

import (
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// failPollerWait makes the idle poller's next wait fail with err and wakes
// its loop; the returned function lets the poller park again (the process
// keeps one poller, which the other tests use).
func failPollerWait(t *testing.T, err error) {
	t.Helper()
	p := getPoller()
	if p == nil {
		t.Skip("no epoll set")
	}
	t.Cleanup(func() { p.failed.Store(false) })
	p.failWait.Store(&err)
	var one = [8]byte{1}
	if _, err := unix.Write(p.evfd, one[:]); err != nil {
		t.Fatal(err)
	}
}

// TestPollerWaitFailureResumesParked: when the idle poller's wait fails,
// the sessions parked in it are resumed and read on, on goroutines of
// their own, and no session parks from then on; the fallback is counted.
// Before, the poller panicked and took the process with it.
func TestPollerWaitFailureResumesParked(t *testing.T) {
	got := make(chan string, 8)
	h := handlerFunc(func(_ *Session, data []byte) { got <- string(data) })
	const n = 3
	rs := make([]*rawSession, n)
	for i := range rs {
		rs[i] = rawServe(t, Options{}, h)
		waitParked(t, rs[i].sess)
	}
	_, before := IdlePollerStats()
	failPollerWait(t, errors.New("injected epoll_wait failure"))
	for i, r := range rs {
		waitFor(t, fmt.Sprint("session ", i, " to be resumed"), func() bool { return !r.sess.parked.Load() })
	}
	if _, after := IdlePollerStats(); after != before+1 {
		t.Fatalf("fallbacks %d after the failure, want %d", after, before+1)
	}
	later := rawServe(t, Options{}, h)
	all := append(rs, later)
	for i, r := range all {
		want := fmt.Sprint("frame ", i)
		writeHandled(t, r, got, want)
		if r.sess.parked.Load() {
			t.Fatalf("session %d parked after the poller failed", i)
		}
	}
	if parked, _ := IdlePollerStats(); parked != 0 {
		t.Fatalf("%d sockets parked after the poller failed, want 0", parked)
	}
}

// readerWaiting reports whether some goroutine waits in idleWait.wait: an
// idle reader that did not park.
func readerWaiting() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "session.idleWait.wait(")
}

// TestNoIdleParkKeepsReader: a session with NoIdlePark set never parks
// its socket: its idle reader waits on its own goroutine, and still
// handles its client's frames.
func TestNoIdleParkKeepsReader(t *testing.T) {
	got := make(chan string, 1)
	rs := rawServe(t, Options{NoIdlePark: true}, handlerFunc(func(_ *Session, data []byte) { got <- string(data) }))
	for i := range 3 {
		want := fmt.Sprint("frame ", i)
		writeHandled(t, rs, got, want)
		waitFor(t, "the idle reader to wait on its goroutine", readerWaiting)
		if rs.sess.parked.Load() {
			t.Fatal("a session with NoIdlePark parked")
		}
	}
}

// TestIdleSocketResumes: an IdleSocket parked in the idle poller runs its
// resume when the peer writes, when its closer unparks it, and when the
// poller's wait fails; after that failure it no longer parks.
func TestIdleSocketResumes(t *testing.T) {
	resumed := make(chan string, 1)
	park := func(t *testing.T, what string) (*IdleSocket, net.Conn, net.Conn) {
		client, server := tcpPair(t)
		p := NewIdleSocket(server, func() { resumed <- what })
		if p == nil {
			t.Fatal("no IdleSocket for a TCP connection")
		}
		if !p.Park() || !p.Parked() {
			t.Fatal("an idle TCP connection did not park")
		}
		return p, server, client
	}
	wait := func(t *testing.T, want string) {
		t.Helper()
		select {
		case got := <-resumed:
			if got != want {
				t.Fatalf("resumed %q, want %q", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%q not resumed", want)
		}
	}
	t.Run("input", func(t *testing.T) {
		_, _, client := park(t, "input")
		if _, err := client.Write([]byte{1}); err != nil {
			t.Fatal(err)
		}
		wait(t, "input")
	})
	t.Run("close", func(t *testing.T) {
		p, server, _ := park(t, "close")
		_ = server.Close()
		p.Unpark()
		wait(t, "close")
		p.Unpark() // once only
		if p.Parked() {
			t.Fatal("parked after Unpark")
		}
	})
	t.Run("poller failure", func(t *testing.T) {
		p, _, _ := park(t, "failure")
		failPollerWait(t, errors.New("injected epoll_wait failure"))
		wait(t, "failure")
		if p.Park() {
			t.Fatal("parked after the poller failed")
		}
	})
}
