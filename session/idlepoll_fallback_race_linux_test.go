package session

import (
	"errors"
	"net"
	"sync"
	"testing"
	"time"
)

// TestPollerFallbackWhileParking: readers that park after each byte read,
// while the poller falls back in the middle of their traffic: every byte
// sent is read (no reader is left parked with nobody to resume it, none
// runs twice), and nothing stays parked.
func TestPollerFallbackWhileParking(t *testing.T) {
	const conns, bytesEach = 8, 200
	type reader struct {
		server net.Conn
		p      *IdleSocket
		got    chan byte
		mu     sync.Mutex // held while a goroutine reads: two at once is a defect
	}
	var done sync.WaitGroup
	rs := make([]*reader, conns)
	clients := make([]net.Conn, conns)
	for i := range rs {
		client, server := tcpPair(t)
		clients[i] = client
		r := &reader{server: server, got: make(chan byte, bytesEach)}
		var run func()
		run = func() {
			defer done.Done()
			if !r.mu.TryLock() {
				t.Error("two readers at once")
				return
			}
			buf := make([]byte, 1)
			for {
				if _, err := r.server.Read(buf); err != nil {
					r.mu.Unlock()
					return
				}
				r.got <- buf[0]
				done.Add(1)
				r.mu.Unlock()
				if r.p.Park() {
					return
				}
				done.Done()
				r.mu.Lock()
			}
		}
		r.p = NewIdleSocket(server, run)
		rs[i] = r
		done.Add(1)
		if !r.p.Park() {
			t.Fatal("did not park")
		}
	}
	var writers sync.WaitGroup
	for _, c := range clients {
		writers.Add(1)
		go func() {
			defer writers.Done()
			for j := range bytesEach {
				if _, err := c.Write([]byte{byte(j)}); err != nil {
					return
				}
			}
		}()
	}
	failPollerWait(t, errors.New("injected epoll_wait failure"))
	for i, r := range rs {
		for j := range bytesEach {
			select {
			case <-r.got:
			case <-time.After(10 * time.Second):
				t.Fatalf("connection %d: %d of %d bytes read", i, j, bytesEach)
			}
		}
	}
	writers.Wait()
	for i := range rs {
		_ = rs[i].server.Close()
		rs[i].p.Unpark()
	}
	done.Wait()
	if parked, _ := IdlePollerStats(); parked != 0 {
		t.Fatalf("%d parked after the fallback", parked)
	}
}
