package session

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"
)

// BenchmarkWakeIdle: one op is one frame written to a session that has
// nothing else to read and handled by it: the reader is woken for every
// frame (from the idle poller where it parks). cpu-ns/op is the
// process's CPU time per op, the client's included.
//
// With others, that many idle sessions wait beside it (in the poller, the
// poller stays up between wakes).
func BenchmarkWakeIdle(b *testing.B) {
	for _, others := range []int{0, 100} {
		b.Run(fmt.Sprintf("others=%d", others), func(b *testing.B) {
			if others > 0 {
				newIdleFleet(b, context.Background(), others, Options{})
			}
			benchWakeIdle(b)
		})
	}
}

func benchWakeIdle(b *testing.B) {
	got := make(chan struct{}, 1)
	rs := rawServe(b, Options{}, handlerFunc(func(*Session, []byte) { got <- struct{}{} }))
	frame := maskedText("hi")
	b.ReportAllocs()
	cpu0 := processCPU()
	for b.Loop() {
		if _, err := rs.client.Write(frame); err != nil {
			b.Fatal(err)
		}
		select {
		case <-got:
		case <-time.After(10 * time.Second):
			b.Fatal("frame not handled")
		}
	}
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU returns the process's user and system CPU time so far, in
// nanoseconds (the client's share included).
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
