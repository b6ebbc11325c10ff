package session

import "sync"

// ReadBudget bounds the read buffers that inbound messages still arriving
// hold across every session that shares it: the chunks a long message is
// read into (see the reader) are taken from it and given back once the
// message is handled. Each session is bounded on its own by
// Options.ReadLimit and Options.MessageTimeout; the budget bounds what
// many sessions sending long or parked messages at once hold together.
//
// A reader that needs a chunk while the budget is spent waits for one to
// be given back, reading nothing meanwhile, so its peer is held back by
// TCP flow control (it first wakes the writers its earlier frames queued
// for: see deferral.go); the wait counts toward the message's
// Options.MessageTimeout, which closes the session (1008) if the message
// is still unfinished by then. So a client that parks unfinished messages
// slows other large messages for at most the message timeout and makes
// nobody else's session fail, while the gateway never holds more than the
// budget. Messages that fit the reader's small pooled buffer (4 KiB) take
// nothing from it.
//
// A ReadBudget is safe for concurrent use.
type ReadBudget struct {
	max int64

	mu    sync.Mutex // guards following
	used  int64
	waits uint64
	freed chan struct{} // closed and replaced when bytes are given back to a waiter
}

// NewReadBudget returns a budget of n bytes. A message needs at least
// one chunk (64 KiB) to be read past the reader's small buffer, so a
// smaller n is raised to that.
func NewReadBudget(n int64) *ReadBudget {
	return &ReadBudget{max: max(n, chunkSize)}
}

// Max returns the budget's size in bytes.
func (b *ReadBudget) Max() int64 { return b.max }

// Used returns the bytes taken now.
func (b *ReadBudget) Used() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// Waits returns how many times a reader had to wait for the budget.
func (b *ReadBudget) Waits() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.waits
}

// take takes n bytes, waiting while the budget is spent; it gives up and
// reports false when the channel cancel returns (asked only when it
// must wait) is closed first. Before it waits it flushes
// d, the waiting reader's own Deferral, so that what the reader's last
// frames fanned out is not held for the wait (deferral.go).
func (b *ReadBudget) take(n int64, cancel func() <-chan struct{}, d *Deferral) bool {
	counted := false
	for {
		b.mu.Lock()
		if b.used+n <= b.max {
			b.used += n
			b.mu.Unlock()
			return true
		}
		if !counted {
			b.waits++
		}
		if b.freed == nil {
			b.freed = make(chan struct{})
		}
		freed := b.freed
		b.mu.Unlock()
		if !counted {
			counted = true
			d.Flush()
		}
		var canceled <-chan struct{}
		if cancel != nil {
			canceled = cancel()
		}
		select {
		case <-freed:
		case <-canceled:
			return false
		}
	}
}

// give gives n bytes back and wakes the readers waiting for them.
func (b *ReadBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	if b.freed != nil {
		close(b.freed)
		b.freed = nil
	}
	b.mu.Unlock()
}
