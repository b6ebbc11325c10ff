package session

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestDeferredWakeIsBounded: a Deferral its owner never flushes (a reader
// stalled in some wait) still wakes the writers it lists, and with them
// what other publishers sent those sessions meanwhile: a session listed
// in one Deferral is not listed in another, so without the bound the
// other publisher's flush would leave its item queued too.
func TestDeferredWakeIsBounded(t *testing.T) {
	f, s, done := parkedSession(t)
	var stalled, other Deferral // the zero Deferral: the default bound
	s.SendDeferred(msg(1, 0, 0, DropOld), &stalled)
	s.SendDeferred(msg(1, 1, 0, DropOld), &other)
	other.Flush() // nothing listed: the session waits for stalled
	waitFor(t, "both frames without a flush of the stalled Deferral",
		func() bool { return len(f.frames()) == 2 })
	if got := strings.Join(f.frames(), " "); got != "m1:0 m1:1" {
		t.Fatalf("frames %q", got)
	}
	// The timer's flush took the list: the session is listed again.
	waitFor(t, "the writer to park", parked(s))
	s.SendDeferred(msg(1, 2, 0, DropOld), &other)
	other.Flush()
	waitFor(t, "the third frame", func() bool { return len(f.frames()) == 3 })
	s.Close(websocket.StatusNormalClosure, "")
	<-done
	stalled.Flush()
}

// TestDeferralBoundRacesOwner: the bound's timer flushes while the owner
// keeps sending and flushing, on two sessions: some reads flushed by the
// owner at once, some left to the timer (or to a writer still running
// from the last wake), some joined by the next read. Every item reaches
// its writer, in order; -race checks the timer's flush against the
// owner's sends and flushes.
func TestDeferralBoundRacesOwner(t *testing.T) {
	const reads = 200
	fs := []*fakeSocket{newFakeSocket(), newFakeSocket()}
	var subs []*Session
	var dones []<-chan struct{}
	for i, f := range fs {
		s := newSession(fmt.Sprint("s", i), Options{EncodeGap: testGap}, f.socket())
		subs = append(subs, s)
		dones = append(dones, startWriter(s))
	}
	d := Deferral{maxWait: 50 * time.Microsecond}
	for off := range int64(reads) {
		for _, s := range subs {
			s.SendDeferred(msg(1, off, 0, DropOld), &d)
		}
		switch off % 3 {
		case 0:
			d.Flush()
		case 1: // not flushed by the owner: wait until both have it
			for _, f := range fs {
				waitFor(t, "the timer's flush", func() bool { return len(f.frames()) > int(off) })
			}
		}
		// case 2: the next read's items join this read's list
	}
	d.Flush()
	want := make([]string, reads)
	for i := range want {
		want[i] = fmt.Sprint("m1:", i)
	}
	for i, f := range fs {
		waitFor(t, "every frame", func() bool { return len(f.frames()) == reads })
		if got := strings.Join(f.frames(), " "); got != strings.Join(want, " ") {
			t.Fatalf("session %d: frames %q", i, got)
		}
	}
	for i, s := range subs {
		s.Close(websocket.StatusNormalClosure, "")
		<-dones[i]
	}
}

// TestReadBudgetWaitFlushesFirst: a reader about to wait for the shared
// read budget first wakes the writers its earlier frames queued for, even
// with a bound (an hour here) that would not.
func TestReadBudgetWaitFlushesFirst(t *testing.T) {
	f := newFakeSocket()
	sub := newSession("sub", Options{EncodeGap: testGap}, f.socket())
	subDone := startWriter(sub)
	waitFor(t, "the writer to park", parked(sub))
	b := NewReadBudget(chunkSize)
	if !b.take(chunkSize, nil, new(Deferral)) { // another session's long message
		t.Fatal("the budget refused its first chunk")
	}
	pub := newSession("pub", Options{EncodeGap: testGap, ReadBudget: b, MaxDeferredWake: time.Hour}, newFakeSocket().socket())
	sub.SendDeferred(msg(1, 0, 0, DropOld), pub.Deferral()) // a frame fanned out
	release := sync.OnceFunc(func() { b.give(chunkSize) })
	t.Cleanup(release)
	got := make(chan bool, 1)
	go func() { // the reader, at the next frame's first chunk
		c := pub.chunk()
		pub.releaseChunks()
		got <- c != nil
	}()
	waitFor(t, "the frame fanned out before the wait", func() bool { return len(f.frames()) == 1 })
	if n := b.Waits(); n != 1 {
		t.Errorf("budget waits %d, want the reader's 1", n)
	}
	release()
	if !<-got {
		t.Error("no chunk once the budget was given back")
	}
	sub.Close(websocket.StatusNormalClosure, "")
	<-subDone
}
