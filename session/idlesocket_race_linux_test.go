package session

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestIdleSocketResumedOnceWhenInputRacesClose: a parked socket whose
// peer writes while its closer closes and unparks it is resumed exactly
// once, whichever comes first, and leaves no slot behind.
func TestIdleSocketResumedOnceWhenInputRacesClose(t *testing.T) {
	const rounds = 300
	for i := range rounds {
		client, server := tcpPair(t)
		var resumes atomic.Int32
		resumed := make(chan struct{}, 4)
		p := NewIdleSocket(server, func() {
			resumes.Add(1)
			resumed <- struct{}{}
		})
		if p == nil || !p.Park() {
			t.Fatal("an idle TCP connection did not park")
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = client.Write([]byte{1}) }()
		go func() { defer wg.Done(); _ = server.Close(); p.Unpark() }()
		wg.Wait()
		select {
		case <-resumed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: never resumed", i)
		}
		// A second resume, were there one, is started before Unpark or
		// the poller's claim returns: both have returned or released.
		p.Unpark()
		_ = client.Close()
		if n := resumes.Load(); n != 1 {
			t.Fatalf("round %d: resumed %d times", i, n)
		}
	}
	waitFor(t, "no socket parked", func() bool { parked, _ := IdlePollerStats(); return parked == 0 })
}

// TestIdleSocketParkedAfterInputResumes: input that arrived before Park
// (the reader's last look found nothing buffered, then the peer wrote)
// resumes the parked socket at once; re-parked after each resume with
// input pending each time, it is resumed every time.
func TestIdleSocketParkedAfterInputResumes(t *testing.T) {
	client, server := tcpPair(t)
	resumed := make(chan struct{}, 1)
	p := NewIdleSocket(server, func() { resumed <- struct{}{} })
	buf := make([]byte, 1)
	for i := range 200 {
		if _, err := client.Write([]byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
		if !p.Park() {
			t.Fatal("did not park")
		}
		select {
		case <-resumed:
		case <-time.After(10 * time.Second):
			t.Fatalf("round %d: input that came before the park never resumed it", i)
		}
		if _, err := server.Read(buf); err != nil {
			t.Fatal(err)
		}
	}
}
