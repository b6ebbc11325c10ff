package engine_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// flushLog is an observer's value in a Batch: it counts its registrations
// and records its flushes in a log shared by every observer of a test.
type flushLog struct {
	name  string
	made  int
	log   *[]string
	count int // records seen since the last flush
}

func (f *flushLog) newValue() (any, func()) {
	f.made++
	return f, func() { *f.log = append(*f.log, fmt.Sprintf("%s:%d", f.name, f.count)); f.count = 0 }
}

// see is what an observer does per record: it finds its value in the
// batch and counts the record there.
func (f *flushLog) see(ctx context.Context) {
	v := engine.BatchOf(ctx).Value(f, f.newValue).(*flushLog)
	v.count++
}

func TestBatch(t *testing.T) {
	var b engine.Batch
	ctx := engine.WithBatch(context.Background(), &b)
	if engine.BatchOf(ctx) != &b {
		t.Fatal("BatchOf does not return the Batch WithBatch carries")
	}
	if engine.BatchOf(context.Background()) != nil {
		t.Fatal("BatchOf of a context without a Batch is not nil")
	}
	var log []string
	x, y := &flushLog{name: "x", log: &log}, &flushLog{name: "y", log: &log}
	tests := []struct {
		name string
		run  func() // the announcements of one run, before End
		want []string
	}{
		{"one observer, three records", func() { x.see(ctx); x.see(ctx); x.see(ctx) }, []string{"x:3"}},
		{"a second observer registers after the first", func() { y.see(ctx); x.see(ctx) }, []string{"x:1", "y:1"}},
		{"only the observers looked up are flushed", func() { y.see(ctx); y.see(ctx) }, []string{"y:2"}},
		{"a run with no lookup flushes nothing", func() {}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log = nil
			tt.run()
			if len(log) != 0 {
				t.Fatalf("flushed before End: %v", log)
			}
			b.End()
			if !slices.Equal(log, tt.want) {
				t.Fatalf("End flushed %v, want %v", log, tt.want)
			}
			b.End()
			if !slices.Equal(log, tt.want) {
				t.Fatalf("a second End flushed again: %v", log)
			}
		})
	}
	if x.made != 1 || y.made != 1 {
		t.Fatalf("values made %d and %d times, want once each for the Batch's life", x.made, y.made)
	}
}

// TestBatchNilFlush: a value registered without a flush is looked up and
// ended like any other.
func TestBatchNilFlush(t *testing.T) {
	var b engine.Batch
	for range 2 {
		if v := b.Value("k", func() (any, func()) { return 7, nil }); v != 7 {
			t.Fatalf("Value = %v, want 7", v)
		}
		b.End()
	}
}

// TestBatchAllocatesNothing: once an observer's value is made, a lookup per
// record and an End per run allocate nothing.
func TestBatchAllocatesNothing(t *testing.T) {
	var b engine.Batch
	ctx := engine.WithBatch(context.Background(), &b)
	var log []string
	f := &flushLog{name: "x", log: &log}
	f.see(ctx)
	b.End()
	log = make([]string, 0, 1000)
	if n := testing.AllocsPerRun(100, func() {
		engine.BatchOf(ctx).Value(f, f.newValue)
		engine.BatchOf(ctx).Value(f, f.newValue)
	}); n != 0 {
		t.Fatalf("%v allocations per two lookups", n)
	}
	var flushes int
	var c engine.Batch
	c.Value(&flushes, func() (any, func()) { return nil, func() { flushes++ } })
	if n := testing.AllocsPerRun(100, func() {
		c.Value(&flushes, nil)
		c.End()
	}); n != 0 {
		t.Fatalf("%v allocations per lookup and End", n)
	}
	if flushes != 101 { // AllocsPerRun runs the function once more to warm up
		t.Fatalf("%d flushes, want 101", flushes)
	}
}

func BenchmarkBatchValue(b *testing.B) {
	var bt engine.Batch
	ctx := engine.WithBatch(context.Background(), &bt)
	var log []string
	fs := []*flushLog{{name: "x", log: &log}, {name: "y", log: &log}}
	for _, f := range fs {
		f.see(ctx)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		f := fs[i&1]
		engine.BatchOf(ctx).Value(f, f.newValue)
		if i%64 == 63 {
			log = log[:0]
			bt.End()
		}
	}
}

// A tail that announces what it has at hand as one run: the observer wakes
// once per run rather than once per record.
func ExampleBatch() {
	var b engine.Batch
	ctx := engine.WithBatch(context.Background(), &b)
	type wakes struct{ pending, woken int }
	key := new(int) // the observer's own key
	seen := func(ctx context.Context) {
		w := engine.BatchOf(ctx).Value(key, func() (any, func()) {
			w := &wakes{}
			return w, func() { w.woken++; fmt.Printf("wake for %d records\n", w.pending); w.pending = 0 }
		}).(*wakes)
		w.pending++
	}
	for _, run := range []int{3, 1} {
		for range run {
			seen(ctx)
		}
		b.End()
	}
	// Output:
	// wake for 3 records
	// wake for 1 records
}
