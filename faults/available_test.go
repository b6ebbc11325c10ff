package faults

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestWhenAvailable: the final checks' reads are retried while JetStream
// answers "temporarily unavailable" after a heal (a partition-2-1 run
// failed on one such answer to its dead-letter read), not past other
// errors or the context.
func TestWhenAvailable(t *testing.T) {
	unavailable := fmt.Errorf("jsengine: dead letters: %w", engine.ErrUnavailable)
	calls := 0
	err := whenAvailable(context.Background(), func() error {
		if calls++; calls < 3 {
			return unavailable
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("err %v after %d calls, want success at the 3rd", err, calls)
	}
	other := errors.New("bad request")
	calls = 0
	if err := whenAvailable(context.Background(), func() error { calls++; return other }); err != other || calls != 1 {
		t.Fatalf("err %v after %d calls, want the other error at once", err, calls)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := whenAvailable(ctx, func() error { return unavailable }); !errors.Is(err, engine.ErrUnavailable) {
		t.Fatalf("err %v once the context ended, want the last unavailable", err)
	}
}
