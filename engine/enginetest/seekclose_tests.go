package enginetest

// Group Seek racing the engine's Close.

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
)

// seekCloseRounds bounds each seeker's loop (with the test's timeout)
// whatever the engine does; a seeker ends at its first ErrClosed.
const seekCloseRounds = 1_000_000

// testSeekRacesClose: seekers move a group's position over and over while
// the engine closes. Close returns within the timeout; each Seek either
// succeeds (before Close) or fails with engine.ErrClosed, never with
// another error and never hanging; once Close has returned every Seek
// fails with engine.ErrClosed and delivers nothing (a Seek under way as
// Close returns may still succeed); nothing the Seeks started outlives
// Close.
func testSeekRacesClose(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	ignore := goleak.IgnoreCurrent() // the factory's own machinery
	topic := env.topic("seekclose")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1})
	sk := newSink()
	g := env.group("g")
	env.join(engine.JoinRequest{Group: g, Pattern: topic, Member: "m1"}, sk.consumer("m1"))
	env.publish(topic, 3, nil)
	sk.delivery(t, env.timeout) // the group holds the partition and leases

	const seekers = 4
	closeDone := make(chan struct{})
	started := make(chan struct{}, seekers)
	results := make(chan error, seekers)
	var wg sync.WaitGroup
	for i := range seekers {
		wg.Go(func() {
			var first bool
			deadline := time.Now().Add(2 * env.timeout)
			for n := 0; n < seekCloseRounds && time.Now().Before(deadline); n++ {
				var afterClose bool // the Seek starts after Close returned
				select {
				case <-closeDone:
					afterClose = true
				default:
				}
				err := env.e.Seek(context.Background(), g, topic, 0, engine.Start{Kind: engine.StartOffset, Offset: int64((i + n) % 3)})
				if !first {
					first = true
					started <- struct{}{}
				}
				switch {
				case err == nil && afterClose:
					results <- errors.New("a Seek made after Close returned succeeded")
					return
				case err == nil:
				case errors.Is(err, engine.ErrClosed):
					results <- nil
					return
				default:
					results <- err
					return
				}
			}
			results <- errors.New("no Seek failed with ErrClosed within the rounds and the timeout")
		})
	}
	for range seekers {
		waitFor(t, started, env.timeout, "a seeker to start")
	}
	cctx, cancel := context.WithTimeout(context.Background(), env.timeout)
	defer cancel()
	err := env.e.Close(cctx)
	close(closeDone)
	if err != nil {
		t.Errorf("Close while seeking: %v", err)
	}
	seen := len(sk.pending())
	for range seekers {
		if err := waitFor(t, results, env.timeout, "a seeker to end"); err != nil {
			t.Errorf("Seek racing Close: %v", err)
		}
	}
	wg.Wait()
	wantErr(t, "Seek after Close", env.e.Seek(ctx(), g, topic, 0, engine.Start{Kind: engine.StartOffset, Offset: 0}), engine.ErrClosed)
	if after := sk.pending(); len(after) > seen {
		t.Errorf("%d deliveries after Close returned: %v", len(after)-seen, after[seen:])
	}
	if err := goleak.Find(ignore); err != nil {
		t.Errorf("goroutines left after Close: %v", err)
	}
}
