package memengine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

func queueFull(i int) engine.DeadLetter {
	return engine.DeadLetter{
		ID: fmt.Sprintf("q%d", i), Reason: engine.ReasonQueueFull, Subscriber: "s",
		Record: engine.Record{Topic: "t", Offset: int64(i), Data: []byte("x")},
	}
}

// TestDeadLetterRing: at the cap each queue_full letter evicts exactly the
// oldest live one, letters redriven meanwhile leave no hole in the count,
// max_attempts letters are never evicted, and the eviction count is exact.
func TestDeadLetterRing(t *testing.T) {
	ctx := context.Background()
	e := memengine.New(memengine.Options{Policy: engine.GroupPolicy{DeadLetterLimit: 4}})
	t.Cleanup(func() { _ = e.Close(ctx) })
	if err := e.AddDeadLetter(ctx, engine.DeadLetter{ID: "ma", Reason: engine.ReasonMaxAttempts, Group: "g",
		Record: engine.Record{Topic: "t"}}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := e.AddDeadLetter(ctx, queueFull(i)); err != nil {
			t.Fatal(err)
		}
	}
	ids := func() string {
		dls, _ := e.DeadLetters(ctx, engine.DeadLetterFilter{})
		var out []string
		for _, d := range dls {
			out = append(out, d.ID)
		}
		return fmt.Sprint(out)
	}
	if got := ids(); got != "[ma q6 q7 q8 q9]" {
		t.Fatalf("letters %s, want the max_attempts one and the newest four queue_full", got)
	}
	if got := e.EvictedDeadLetters(); got != 6 {
		t.Fatalf("evicted %d, want 6", got)
	}
	// Redrive two (one id twice, one unknown): each is appended once.
	if n, err := e.Redrive(ctx, engine.RedriveRequest{IDs: []string{"q7", "q7", "nope", "q8"}, AppendToTopics: true}); err != nil || n != 2 {
		t.Fatalf("Redrive = %d, %v; want 2", n, err)
	}
	for i := 10; i < 13; i++ {
		if err := e.AddDeadLetter(ctx, queueFull(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := ids(); got != "[ma q10 q11 q12]" && got != "[ma q9 q10 q11 q12]" {
		t.Fatalf("letters %s after redrive and three more", got)
	}
	dls, _ := e.DeadLetters(ctx, engine.DeadLetterFilter{Reason: engine.ReasonQueueFull})
	if len(dls) > 4 {
		t.Fatalf("%d queue_full letters kept, cap 4", len(dls))
	}
	if got := e.EvictedDeadLetters(); got != int64(13-2-len(dls)) { // 13 added, 2 redriven
		t.Fatalf("evicted %d with %d kept: the count must be exact", got, len(dls))
	}
}

// BenchmarkAddDeadLetterAtCap adds queue_full letters to a full store: the
// cost per letter must not grow with the cap.
func BenchmarkAddDeadLetterAtCap(b *testing.B) {
	for _, limit := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("cap=%d", limit), func(b *testing.B) {
			ctx := context.Background()
			e := memengine.New(memengine.Options{Policy: engine.GroupPolicy{DeadLetterLimit: limit}})
			b.Cleanup(func() { _ = e.Close(ctx) })
			for i := range limit {
				_ = e.AddDeadLetter(ctx, queueFull(i))
			}
			dl := queueFull(0)
			dl.ID = ""
			b.ReportAllocs()
			for b.Loop() {
				_ = e.AddDeadLetter(ctx, dl)
			}
		})
	}
}

// BenchmarkRedriveManyIDs redrives by a long list of ids over a full
// store: O(ids), not letters × ids.
func BenchmarkRedriveManyIDs(b *testing.B) {
	ctx := context.Background()
	const letters = 10_000
	ids := make([]string, 0, 2*letters)
	for i := range 2 * letters {
		ids = append(ids, fmt.Sprintf("absent-%d", i))
	}
	e := memengine.New(memengine.Options{Policy: engine.GroupPolicy{DeadLetterLimit: letters}})
	b.Cleanup(func() { _ = e.Close(ctx) })
	for i := range letters {
		_ = e.AddDeadLetter(ctx, queueFull(i))
	}
	b.ReportAllocs()
	for b.Loop() {
		if n, err := e.Redrive(ctx, engine.RedriveRequest{IDs: ids, AppendToTopics: true}); err != nil || n != 0 {
			b.Fatalf("Redrive = %d, %v", n, err)
		}
	}
}
