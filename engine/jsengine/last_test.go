package jsengine_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// subscribeLast makes the engine calls a replaying subscribe with
// {"last": n} makes in the router (replayPlan, then replayPart and readLog
// for every matched partition): one Topics, then reads from
// max(earliest, next-n) until a read returns nothing, each from memory
// (ReadSeen) when the engine can answer there, else with Read. It returns
// the records read.
func subscribeLast(ctx context.Context, tb testing.TB, e *jsengine.Engine, n int64) int {
	tb.Helper()
	topics, err := e.Topics(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	got := 0
	for _, t := range topics {
		for _, p := range t.Parts {
			off := max(p.Earliest, p.Next-n)
			if off >= p.Next {
				continue
			}
			for range 100 {
				recs, next, ok := e.ReadSeen(t.Config.Name, p.Partition, off, 256)
				if !ok {
					recs, next, err = e.Read(ctx, t.Config.Name, p.Partition, off, 256)
					if err != nil {
						tb.Fatal(err)
					}
				}
				if len(recs) == 0 {
					break
				}
				got += len(recs)
				off = next
			}
		}
	}
	return got
}

// lastFixture stores depth records in each of topics topics from one node
// and returns a second node, whose tail saw none of them, with its
// connection for counting round trips.
func lastFixture(tb testing.TB, topics, depth int) (*jsengine.Engine, *nats.Conn) {
	url := natstest.URL(tb)
	prefix := natstest.Prefix(tb, url)
	w := newNode(tb, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	for i := range topics {
		for j := range depth {
			if _, err := w.Append(ctx, engine.Message{Topic: fmt.Sprintf("dash.t%03d", i), Data: fmt.Appendf(nil, "%d", j)}); err != nil {
				tb.Fatal(err)
			}
		}
	}
	r, nc := newConnNode(tb, url, prefix, engine.GroupPolicy{}, 0)
	return r, nc
}

// TestFromLastRoundTrips: a {"last": 1} subscribe over a wildcard matching
// 200 topics, on a node that never saw their records, costs the listing's
// load of every partition's state (two direct gets each) and nothing per
// partition after it: the newest record came with that load.
func TestFromLastRoundTrips(t *testing.T) {
	const topics = 200
	r, nc := lastFixture(t, topics, 3)
	ctx := context.Background()
	before := nc.Stats().OutMsgs
	if got := subscribeLast(ctx, t, r, 1); got != topics {
		t.Fatalf("read %d records, want %d", got, topics)
	}
	sent := nc.Stats().OutMsgs - before
	t.Logf("first subscribe: %d messages sent for %d partitions: %.2f per partition", sent, topics, float64(sent)/topics)
	if per := float64(sent) / topics; per > 3 {
		t.Errorf("%.2f messages per partition for a last-1 subscribe, want at most 3", per)
	}
}

// TestFromLastDeeper: {"last": 5} over 50 topics a node's tail never saw
// reads the four records before the newest from NATS (Read), the newest
// from the load, and a second subscribe right after costs nothing per
// partition: the listing is cached and the records are in memory.
func TestFromLastDeeper(t *testing.T) {
	const topics = 50
	r, nc := lastFixture(t, topics, 8)
	ctx := context.Background()
	before := nc.Stats().OutMsgs
	if got := subscribeLast(ctx, t, r, 5); got != 5*topics {
		t.Fatalf("read %d records, want %d", got, 5*topics)
	}
	t.Logf("first subscribe: %d messages sent for %d partitions", nc.Stats().OutMsgs-before, topics)
	before = nc.Stats().OutMsgs
	if got := subscribeLast(ctx, t, r, 5); got != 5*topics {
		t.Fatalf("second subscribe read %d records, want %d", got, 5*topics)
	}
	sent := nc.Stats().OutMsgs - before
	t.Logf("second subscribe: %d messages sent for %d partitions", sent, topics)
	if sent > 0 {
		t.Errorf("second subscribe sent %d messages, want none", sent)
	}
}

// BenchmarkFromLast measures a {"last": 1} subscribe's engine calls over a
// wildcard matching 200 topics (the listing cached, as between two
// subscribes within a second).
func BenchmarkFromLast(b *testing.B) {
	const topics = 200
	r, _ := lastFixture(b, topics, 1)
	ctx := context.Background()
	subscribeLast(ctx, b, r, 1)
	b.ReportAllocs()
	for b.Loop() {
		if got := subscribeLast(ctx, b, r, 1); got != topics {
			b.Fatalf("read %d records, want %d", got, topics)
		}
	}
}

// TestReadSeen: ReadSeen answers from memory only what a load, a Read or
// the tail put there, and says so when it cannot answer.
func TestReadSeen(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	w := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx := context.Background()
	for i := range 3 {
		if _, err := w.Append(ctx, engine.Message{Topic: "seen", Data: fmt.Appendf(nil, "%d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	r := newNode(t, nodeOpts{url: url, prefix: prefix})
	offsets := func(recs []*engine.Record) []int64 {
		var out []int64
		for _, rec := range recs {
			out = append(out, rec.Offset)
		}
		return out
	}
	if _, _, ok := r.ReadSeen("seen", 0, 0, 10); ok {
		t.Fatal("ReadSeen answered before the partition's state was loaded")
	}
	if _, _, ok := r.ReadSeen("nope", 0, 0, 10); ok {
		t.Fatal("ReadSeen answered for an unknown topic")
	}
	if _, err := r.Topic(ctx, "seen"); err != nil {
		t.Fatal(err)
	}
	if recs, next, ok := r.ReadSeen("seen", 0, 2, 10); !ok || next != 3 || fmt.Sprint(offsets(recs)) != "[2]" {
		t.Fatalf("last record after a load: %v %d %v, want [2] 3 true", offsets(recs), next, ok)
	}
	if _, _, ok := r.ReadSeen("seen", 0, 0, 10); ok {
		t.Fatal("ReadSeen answered for records never fetched")
	}
	if recs, _, err := r.Read(ctx, "seen", 0, 0, 10); err != nil || len(recs) != 3 {
		t.Fatalf("Read: %d records, %v", len(recs), err)
	}
	if recs, next, ok := r.ReadSeen("seen", 0, 0, 10); !ok || next != 3 || fmt.Sprint(offsets(recs)) != "[0 1 2]" {
		t.Fatalf("after a Read: %v %d %v, want [0 1 2] 3 true", offsets(recs), next, ok)
	}
	if recs, next, ok := r.ReadSeen("seen", 0, 3, 10); !ok || next != 3 || len(recs) != 0 {
		t.Fatalf("at the end: %v %d %v, want [] 3 true", offsets(recs), next, ok)
	}
	if _, err := w.Append(ctx, engine.Message{Topic: "seen", Data: []byte("3")}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs, next, ok := r.ReadSeen("seen", 0, 3, 10)
		if ok && len(recs) == 1 && next == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the tail's record never reached ReadSeen: %v %d %v", offsets(recs), next, ok)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReadSeenAge: records past the topic's MaxAge on the engine's clock
// are left to Read, which applies age retention.
func TestReadSeenAge(t *testing.T) {
	url := natstest.URL(t)
	clock := enginetest.NewFakeClock(time.Unix(1_700_000_000, 0))
	e := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Clock: clock}})
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "aged", Partitions: 1, MaxAge: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Append(ctx, engine.Message{Topic: "aged", Data: []byte("old")}); err != nil {
		t.Fatal(err)
	}
	if recs, _, ok := e.ReadSeen("aged", 0, 0, 10); !ok || len(recs) != 1 {
		t.Fatalf("fresh record: %d records, ok %v", len(recs), ok)
	}
	clock.Advance(2 * time.Minute)
	if _, _, ok := e.ReadSeen("aged", 0, 0, 10); ok {
		t.Fatal("ReadSeen answered with a record past MaxAge")
	}
	if recs, next, err := e.Read(ctx, "aged", 0, 0, 10); err != nil || len(recs) != 0 || next != 1 {
		t.Fatalf("Read after MaxAge: %d records, next %d, %v", len(recs), next, err)
	}
	if recs, next, ok := e.ReadSeen("aged", 0, 0, 10); !ok || len(recs) != 0 || next != 1 {
		t.Fatalf("ReadSeen after the trim: %d records, next %d, ok %v", len(recs), next, ok)
	}
}
