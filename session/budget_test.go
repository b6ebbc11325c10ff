package session

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// blockingEnd is a pieceReader end that parks the reader (as a client
// parks an unfinished message) until release is closed, then ends the
// message.
func parkedReader(size int, parked chan<- struct{}, release <-chan struct{}) *pieceReader {
	return &pieceReader{
		data: bytes.Repeat([]byte("p"), size), max: 64 << 10, rng: rand.New(rand.NewPCG(7, 8)), end: io.EOF,
		atEnd: func() {
			close(parked)
			<-release
		},
	}
}

// waitFor waits, bounded, until cond holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReadBudgetShared: sessions sharing a ReadBudget hold at most its
// bytes in read chunks together. A session that needs a chunk while a
// parked message holds the budget waits, reading nothing, and gets its
// message whole once the chunks come back; one that closes while waiting
// gives up at once.
func TestReadBudgetShared(t *testing.T) {
	b := NewReadBudget(2 * chunkSize)
	opts := Options{EncodeGap: testGap, ReadBudget: b}
	parker := newSession("parker", opts, newFakeSocket().socket())
	waiter := newSession("waiter", opts, newFakeSocket().socket())

	// The parked message takes both chunks: 100 KiB past the small buffer.
	parked, release := make(chan struct{}), make(chan struct{})
	parkDone := make(chan error, 1)
	go func() {
		parkDone <- parker.readFrame(parkedReader(100<<10, parked, release), handlerFunc(func(*Session, []byte) {}))
	}()
	<-parked
	if got := b.Used(); got != 2*chunkSize {
		t.Fatalf("budget used %d with the message parked, want %d", got, 2*chunkSize)
	}

	want := bytes.Repeat([]byte("w"), 10<<10)
	got := make(chan []byte, 1)
	waitDone := make(chan error, 1)
	go func() {
		r := &pieceReader{data: want, max: 1 << 20, rng: rand.New(rand.NewPCG(9, 10)), end: io.EOF}
		waitDone <- waiter.readFrame(r, handlerFunc(func(_ *Session, data []byte) { got <- bytes.Clone(data) }))
	}()
	waitFor(t, "the second reader to wait for the budget", func() bool { return b.Waits() == 1 })
	select {
	case <-got:
		t.Fatal("a message was read past the budget")
	default:
	}
	if used := b.Used(); used != 2*chunkSize {
		t.Fatalf("budget used %d while a reader waits, want %d", used, 2*chunkSize)
	}

	close(release)
	if err := <-parkDone; err != nil {
		t.Fatalf("parked message: %v", err)
	}
	if err := <-waitDone; err != nil {
		t.Fatalf("waiting message: %v", err)
	}
	if m := <-got; !bytes.Equal(m, want) {
		t.Fatalf("waiting message arrived with %d bytes, want %d", len(m), len(want))
	}
	if used := b.Used(); used != 0 {
		t.Fatalf("budget used %d after both messages, want 0", used)
	}

	// A reader waiting for the budget gives up when its session closes.
	parked, release = make(chan struct{}), make(chan struct{})
	go func() {
		parkDone <- parker.readFrame(parkedReader(100<<10, parked, release), handlerFunc(func(*Session, []byte) {}))
	}()
	<-parked
	closer := newSession("closer", opts, newFakeSocket().socket())
	go func() {
		r := &pieceReader{data: want, max: 1 << 20, rng: rand.New(rand.NewPCG(11, 12)), end: io.EOF}
		waitDone <- closer.readFrame(r, handlerFunc(func(*Session, []byte) { t.Error("a message was read past the budget") }))
	}()
	waitFor(t, "the third reader to wait for the budget", func() bool { return b.Waits() == 2 })
	closer.Close(websocket.StatusNormalClosure, "bye")
	if err := <-waitDone; !errors.Is(err, errReadCanceled) {
		t.Fatalf("reader of a closed session: %v, want %v", err, errReadCanceled)
	}
	close(release)
	if err := <-parkDone; err != nil {
		t.Fatalf("parked message: %v", err)
	}
	if used := b.Used(); used != 0 {
		t.Fatalf("budget used %d at the end, want 0", used)
	}
}

// TestReadBudgetIgnoresPooledCapacity: a message longer than the small
// first buffer takes from the read budget even when the buffer pool hands
// the reader a large buffer (one a writer's batch grew): the budget, not
// the pool's luck, bounds what partly read messages hold.
func TestReadBudgetIgnoresPooledCapacity(t *testing.T) {
	b := NewReadBudget(chunkSize)
	opts := Options{EncodeGap: testGap, ReadBudget: b}
	parker := newSession("parker", opts, newFakeSocket().socket())
	waiter := newSession("waiter", opts, newFakeSocket().socket())

	for range 64 { // large buffers in the pool, as writers' batches leave them
		big := make([]byte, 0, 64<<10)
		putBuf(&big)
	}
	parked, release := make(chan struct{}), make(chan struct{})
	parkDone := make(chan error, 1)
	go func() {
		parkDone <- parker.readFrame(parkedReader(20<<10, parked, release), handlerFunc(func(*Session, []byte) {}))
	}()
	<-parked
	if got := b.Used(); got != chunkSize {
		close(release)
		<-parkDone
		t.Fatalf("budget used %d with a 20 KiB message parked, want %d", got, chunkSize)
	}

	got := make(chan []byte, 1)
	waitDone := make(chan error, 1)
	go func() {
		r := &pieceReader{data: bytes.Repeat([]byte("w"), 10<<10), max: 1 << 20, rng: rand.New(rand.NewPCG(3, 4)), end: io.EOF}
		waitDone <- waiter.readFrame(r, handlerFunc(func(_ *Session, data []byte) { got <- bytes.Clone(data) }))
	}()
	deadline := time.After(10 * time.Second)
	for b.Waits() == 0 {
		select {
		case data := <-got:
			t.Fatalf("a %d-byte message was read with the budget spent", len(data))
		case <-deadline:
			t.Fatal("the second reader neither waited for the budget nor read")
		case <-time.After(time.Millisecond):
		}
	}
	close(release)
	if err := <-parkDone; err != nil {
		t.Fatalf("parked message: %v", err)
	}
	if data := <-got; len(data) != 10<<10 {
		t.Fatalf("waiting message: %d bytes, want %d", len(data), 10<<10)
	}
	if err := <-waitDone; err != nil {
		t.Fatalf("waiting message: %v", err)
	}
}
