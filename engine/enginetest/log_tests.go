package enginetest

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

func testCreateInspectDelete(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("a")
	cfg := engine.TopicConfig{
		Name: name, Partitions: 3, MaxMessages: 10, MaxAge: time.Hour,
		OnFull: engine.Block, BlockTimeout: 2 * time.Second, Partitioner: engine.RoundRobin,
	}
	info := env.create(cfg)
	if info.Config != cfg {
		t.Errorf("CreateTopic config = %+v, want %+v", info.Config, cfg)
	}
	if len(info.Parts) != 3 {
		t.Fatalf("CreateTopic parts = %d, want 3", len(info.Parts))
	}
	for i, p := range info.Parts {
		if p != (engine.PartitionInfo{Partition: i}) {
			t.Errorf("new partition %d = %+v, want empty", i, p)
		}
	}
	_, err := env.e.CreateTopic(ctx(), cfg)
	wantErr(t, "CreateTopic twice", err, engine.ErrTopicExists)

	a := env.append(engine.Message{Topic: name, Key: "k", Headers: map[string]string{"h": "v"}, Data: []byte("hello")})
	got := env.info(name)
	if got.Config != cfg || len(got.Parts) != 3 {
		t.Fatalf("Topic = %+v, want config %+v and 3 parts", got, cfg)
	}
	p := got.Parts[a.Partition]
	if p.Earliest != 0 || p.Next != 1 || p.Bytes < int64(len("hello")) || p.Dropped != 0 {
		t.Errorf("partition after one append = %+v, want earliest 0, next 1, bytes >= 5", p)
	}

	all, err := env.e.Topics(ctx())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(all, func(ti engine.TopicInfo) bool { return ti.Config.Name == name }) {
		t.Errorf("Topics() lacks %s", name)
	}

	_, _, err = env.e.Read(ctx(), name, 3, 0, 10)
	wantErr(t, "Read of partition 3 of 3", err, engine.ErrUnknownPartition)
	_, _, err = env.e.Read(ctx(), name, -1, 0, 10)
	wantErr(t, "Read of partition -1", err, engine.ErrUnknownPartition)

	if err := env.e.DeleteTopic(ctx(), name); err != nil {
		t.Fatalf("DeleteTopic: %v", err)
	}
	_, err = env.e.Topic(ctx(), name)
	wantErr(t, "Topic after delete", err, engine.ErrUnknownTopic)
	_, _, err = env.e.Read(ctx(), name, 0, 0, 10)
	wantErr(t, "Read after delete", err, engine.ErrUnknownTopic)
	_, err = env.e.Resolve(ctx(), name, 0, engine.Start{Kind: engine.StartLatest})
	wantErr(t, "Resolve after delete", err, engine.ErrUnknownTopic)
	wantErr(t, "DeleteTopic twice", env.e.DeleteTopic(ctx(), name), engine.ErrUnknownTopic)

	// The name can be used again, from offset 0.
	env.create(engine.TopicConfig{Name: name})
	if a := env.append(engine.Message{Topic: name}); a.Offset != 0 {
		t.Errorf("first append to a recreated topic got offset %d, want 0", a.Offset)
	}
}

func testInvalidConfig(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	tests := []struct {
		name string
		cfg  engine.TopicConfig
	}{
		{"negative partitions", engine.TopicConfig{Partitions: -1}},
		{"too many partitions", engine.TopicConfig{Partitions: engine.MaxPartitions + 1}},
		{"negative max messages", engine.TopicConfig{MaxMessages: -1}},
		{"negative max age", engine.TopicConfig{MaxAge: -time.Second}},
		{"negative block timeout", engine.TopicConfig{BlockTimeout: -time.Second}},
		{"unknown on_full", engine.TopicConfig{OnFull: "sometimes"}},
		{"unknown partitioner", engine.TopicConfig{Partitioner: "random"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.cfg.Name = env.topic(safeName(tt.name))
			_, err := env.e.CreateTopic(ctx(), tt.cfg)
			wantErr(t, "CreateTopic", err, engine.ErrInvalidConfig)
			_, err = env.e.Topic(ctx(), tt.cfg.Name)
			wantErr(t, "Topic after a rejected create", err, engine.ErrUnknownTopic)
		})
	}
}

func testDefaultsApplied(t *testing.T, s *suite) {
	defaults := engine.TopicConfig{Partitions: 2, MaxMessages: 50, OnFull: engine.DropOldest, Partitioner: engine.RoundRobin}
	env := s.env(t, Config{Defaults: defaults})
	info := env.create(engine.TopicConfig{Name: env.topic("a"), MaxMessages: 7})
	c := info.Config
	if c.Partitions != 2 || c.MaxMessages != 7 || c.OnFull != engine.DropOldest || c.Partitioner != engine.RoundRobin {
		t.Errorf("config = %+v, want partitions 2, max messages 7, drop_oldest, round_robin", c)
	}
	if c.BlockTimeout <= 0 {
		t.Errorf("block timeout = %v, want the engine default (> 0)", c.BlockTimeout)
	}
}

func testAutoCreate(t *testing.T, s *suite) {
	env := s.env(t, Config{Defaults: engine.TopicConfig{Partitions: 3}})
	name := env.topic("auto")
	a := env.append(engine.Message{Topic: name, Data: []byte("x")})
	if a.Offset != 0 || a.Duplicate {
		t.Errorf("first append = %+v, want offset 0", a)
	}
	info := env.info(name)
	if info.Config.Partitions != 3 || len(info.Parts) != 3 {
		t.Errorf("auto-created topic has %d partitions, want the default 3", len(info.Parts))
	}
	recs, _ := env.read(name, a.Partition, 0, 10)
	if len(recs) != 1 || string(recs[0].Data) != "x" {
		t.Errorf("read back %v, want [x]", dataOf(recs))
	}
}

func testStrict(t *testing.T, s *suite) {
	env := s.env(t, Config{Strict: true})
	name := env.topic("strict")
	_, err := env.e.Append(ctx(), engine.Message{Topic: name, Data: []byte("x")})
	wantErr(t, "Append to an unknown topic in strict mode", err, engine.ErrUnknownTopic)
	_, err = env.e.Topic(ctx(), name)
	wantErr(t, "Topic after a strict append", err, engine.ErrUnknownTopic)
	env.create(engine.TopicConfig{Name: name})
	if a := env.append(engine.Message{Topic: name}); a.Offset != 0 {
		t.Errorf("append after create = %+v, want offset 0", a)
	}
}

func testRecordFields(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("fields")
	env.create(engine.TopicConfig{Name: name, Partitions: 1})
	data := []byte(`{"n":1}`)
	headers := map[string]string{"region": "eu"}
	before := time.Now()
	a := env.append(engine.Message{Topic: name, Key: "k1", Headers: headers, Data: data, Priority: 3})
	data[0] = 'X' // the engine must have copied the payload
	headers["region"] = "us"
	recs, next := env.read(name, 0, 0, 10)
	if len(recs) != 1 || next != 1 {
		t.Fatalf("read %d records, next %d; want 1, 1", len(recs), next)
	}
	r := recs[0]
	if r.Topic != name || r.Partition != 0 || r.Offset != 0 || r.Key != "k1" || r.Priority != 3 {
		t.Errorf("record = %+v", r)
	}
	if string(r.Data) != `{"n":1}` {
		t.Errorf("data = %s, want the bytes as appended", r.Data)
	}
	if r.Headers["region"] != "eu" || len(r.Headers) != 1 {
		t.Errorf("headers = %v, want region=eu as appended", r.Headers)
	}
	if !r.Time.Equal(a.Time) {
		t.Errorf("record time %v != appended time %v", r.Time, a.Time)
	}
	if r.Time.Before(before.Add(-time.Minute)) || r.Time.After(time.Now().Add(time.Minute)) {
		t.Errorf("append time %v is not about now", r.Time)
	}
}

func testKeyOrder(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("keys")
	const parts, keys, perKey = 4, 6, 20
	env.create(engine.TopicConfig{Name: name, Partitions: parts, Partitioner: engine.KeyHash})
	for i := range keys * perKey {
		key := fmt.Sprintf("key-%d", i%keys)
		a := env.append(engine.Message{Topic: name, Key: key, Data: fmt.Appendf(nil, "%s/%d", key, i/keys)})
		if want := engine.KeyPartition(key, parts); a.Partition != want {
			t.Fatalf("key %s went to partition %d, want KeyPartition = %d", key, a.Partition, want)
		}
	}
	for p := range parts {
		recs, _ := env.read(name, p, 0, keys*perKey)
		next := map[string]int{}
		for _, r := range recs {
			key, seqText, _ := strings.Cut(string(r.Data), "/")
			seq, err := strconv.Atoi(seqText)
			if err != nil || key != r.Key {
				t.Fatalf("record %q with key %q is not what was appended", r.Data, r.Key)
			}
			if seq != next[key] {
				t.Fatalf("partition %d: key %s record %d arrived where %d was due", p, key, seq, next[key])
			}
			next[key]++
		}
	}
	// Keyless records spread over every partition.
	seen := map[int]bool{}
	for range 4 * parts {
		seen[env.append(engine.Message{Topic: name}).Partition] = true
	}
	if len(seen) != parts {
		t.Errorf("keyless records used partitions %v, want all %d", seen, parts)
	}
}

func testConcurrentOffsets(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("concurrent")
	const producers, each, parts = 8, 300, 2
	env.create(engine.TopicConfig{Name: name, Partitions: parts, MaxMessages: producers * each})
	var wg sync.WaitGroup
	results := make([][]engine.Appended, producers)
	errs := make(chan error, producers)
	for w := range producers {
		wg.Go(func() {
			for i := range each {
				a, err := env.e.Append(context.Background(), engine.Message{Topic: name, Data: fmt.Appendf(nil, "%d-%d", w, i)})
				if err != nil {
					errs <- err
					return
				}
				results[w] = append(results[w], a)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("concurrent Append: %v", err)
	}
	offsets := make([][]int64, parts)
	for _, rs := range results {
		for _, a := range rs {
			offsets[a.Partition] = append(offsets[a.Partition], a.Offset)
		}
	}
	total := 0
	for p, offs := range offsets {
		slices.Sort(offs)
		for i, o := range offs {
			if o != int64(i) {
				t.Fatalf("partition %d: offsets %v... are not 0..n-1 without gaps or repeats", p, offs[:min(len(offs), i+3)])
			}
		}
		recs, _ := env.read(name, p, 0, producers*each)
		if len(recs) != len(offs) {
			t.Fatalf("partition %d: read %d records, appended %d", p, len(recs), len(offs))
		}
		total += len(recs)
	}
	if total != producers*each {
		t.Fatalf("stored %d records, want %d", total, producers*each)
	}
}

func testReadClamp(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("read")
	env.create(engine.TopicConfig{Name: name, Partitions: 1, MaxMessages: 5, OnFull: engine.DropOldest})
	env.publish(name, 10, nil) // keeps 5..9
	tests := []struct {
		from     int64
		limit    int
		want     []int64
		wantNext int64
	}{
		{0, 3, []int64{5, 6, 7}, 8},
		{-4, 1, []int64{5}, 6},
		{8, 100, []int64{8, 9}, 10},
		{10, 10, []int64{}, 10},
		{6, 0, []int64{}, 6},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("from_%d_limit_%d", tt.from, tt.limit), func(t *testing.T) {
			recs, next := env.read(name, 0, tt.from, tt.limit)
			if got := offsetsOf(recs); !slices.Equal(got, tt.want) || next != tt.wantNext {
				t.Errorf("Read = %v next %d, want %v next %d", got, next, tt.want, tt.wantNext)
			}
		})
	}
}

func testResolve(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("resolve")
	env.create(engine.TopicConfig{Name: name, Partitions: 1, MaxMessages: 8, OnFull: engine.DropOldest})
	env.publish(name, 12, nil) // keeps 4..11
	recs, _ := env.read(name, 0, 0, 100)
	if len(recs) != 8 {
		t.Fatalf("retained %d records, want 8", len(recs))
	}
	// The first offset at or after a time; equal times are possible on a
	// coarse clock, so the expectation comes from the records.
	firstAtOrAfter := func(tm time.Time) int64 {
		for _, r := range recs {
			if !r.Time.Before(tm) {
				return r.Offset
			}
		}
		return 12
	}
	mid := recs[4].Time
	tests := []struct {
		name  string
		start engine.Start
		want  int64
	}{
		{"earliest", engine.Start{Kind: engine.StartEarliest}, 4},
		{"default is earliest", engine.Start{}, 4},
		{"latest is next", engine.Start{Kind: engine.StartLatest}, 12},
		{"time inclusive", engine.Start{Kind: engine.StartTime, Time: mid}, firstAtOrAfter(mid)},
		{"time before everything", engine.Start{Kind: engine.StartTime, Time: recs[0].Time.Add(-time.Hour)}, 4},
		{"time after everything", engine.Start{Kind: engine.StartTime, Time: recs[7].Time.Add(time.Hour)}, 12},
		{"offset", engine.Start{Kind: engine.StartOffset, Offset: 6}, 6},
		{"offset below earliest", engine.Start{Kind: engine.StartOffset, Offset: 1}, 4},
		{"offset past next", engine.Start{Kind: engine.StartOffset, Offset: 99}, 12},
	}
	for _, tt := range tests {
		t.Run(safeName(tt.name), func(t *testing.T) {
			got, err := env.e.Resolve(ctx(), name, 0, tt.start)
			if err != nil || got != tt.want {
				t.Errorf("Resolve(%+v) = %d, %v; want %d", tt.start, got, err, tt.want)
			}
		})
	}
	if firstAtOrAfter(mid) > 8 {
		t.Errorf("time start skipped the record at the given time")
	}
}

// tail is an Observer recording what it sees; safe for concurrent use.
type tail struct {
	mu      sync.Mutex // guards following
	recs    []*engine.Record
	deleted []string
}

func (o *tail) Appended(r *engine.Record) {
	o.mu.Lock()
	o.recs = append(o.recs, r)
	o.mu.Unlock()
}

func (o *tail) TopicDeleted(topic string) {
	o.mu.Lock()
	o.deleted = append(o.deleted, topic)
	o.mu.Unlock()
}

// of returns the records of topic seen so far.
func (o *tail) of(topic string) []*engine.Record {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*engine.Record
	for _, r := range o.recs {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

func testWatch(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("watch")
	const parts, producers, each = 3, 4, 100
	env.create(engine.TopicConfig{Name: name, Partitions: parts, MaxMessages: producers * each})
	obs := &tail{}
	stop := env.e.Watch(obs)
	var wg sync.WaitGroup
	for w := range producers {
		wg.Go(func() {
			for i := range each {
				if _, err := env.e.Append(context.Background(), engine.Message{Topic: name, Data: fmt.Appendf(nil, "%d-%d", w, i)}); err != nil {
					t.Errorf("Append: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	waitUntil(t, env.timeout, "the observer to see every append", func() bool { return len(obs.of(name)) >= producers*each })
	seen := obs.of(name)
	if len(seen) != producers*each {
		t.Fatalf("observer saw %d records, want %d", len(seen), producers*each)
	}
	next := make([]int64, parts)
	for _, r := range seen {
		if r.Offset != next[r.Partition] {
			t.Fatalf("observer saw %s/%d@%d where offset %d was due", r.Topic, r.Partition, r.Offset, next[r.Partition])
		}
		next[r.Partition]++
	}
	for p := range parts {
		recs, _ := env.read(name, p, 0, producers*each)
		if int64(len(recs)) != next[p] {
			t.Errorf("partition %d: observer saw %d records, log holds %d", p, next[p], len(recs))
		}
	}

	stop()
	env.append(engine.Message{Topic: name})
	// A second observer sees the append made after the first stopped, so
	// waiting for it bounds how long the stopped one had to (wrongly) see it.
	other := &tail{}
	stop2 := env.e.Watch(other)
	defer stop2()
	env.append(engine.Message{Topic: name})
	waitUntil(t, env.timeout, "the second observer", func() bool { return len(other.of(name)) == 1 })
	if n := len(obs.of(name)); n != producers*each {
		t.Errorf("stopped observer saw %d records, want %d", n, producers*each)
	}

	if err := env.e.DeleteTopic(ctx(), name); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, env.timeout, "TopicDeleted", func() bool {
		other.mu.Lock()
		defer other.mu.Unlock()
		return slices.Contains(other.deleted, name)
	})
}

func testDedupe(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name, other := env.topic("dedupe"), env.topic("other")
	env.create(engine.TopicConfig{Name: name, Partitions: 4})
	first := env.append(engine.Message{Topic: name, MsgID: "m-1", Data: []byte("one")})
	if first.Duplicate {
		t.Fatalf("first append reported duplicate")
	}
	for range 3 {
		again := env.append(engine.Message{Topic: name, MsgID: "m-1", Data: []byte("two")})
		if !again.Duplicate || again.Partition != first.Partition || again.Offset != first.Offset {
			t.Fatalf("repeat = %+v, want duplicate at %d@%d", again, first.Partition, first.Offset)
		}
	}
	total := int64(0)
	for _, p := range env.info(name).Parts {
		total += p.Next
	}
	if total != 1 {
		t.Errorf("topic holds %d records after a duplicated publish, want 1", total)
	}
	if a := env.append(engine.Message{Topic: other, MsgID: "m-1"}); a.Duplicate {
		t.Errorf("the same msg_id on another topic was a duplicate")
	}
	if a := env.append(engine.Message{Topic: name, MsgID: "m-2"}); a.Duplicate {
		t.Errorf("a new msg_id was a duplicate")
	}

	// Concurrent repeats store the record once.
	var wg sync.WaitGroup
	var mu sync.Mutex
	var results []engine.Appended
	for range 8 {
		wg.Go(func() {
			a, err := env.e.Append(context.Background(), engine.Message{Topic: name, MsgID: "m-3"})
			if err != nil {
				t.Errorf("Append: %v", err)
				return
			}
			mu.Lock()
			results = append(results, a)
			mu.Unlock()
		})
	}
	wg.Wait()
	dups := 0
	for _, a := range results {
		if a.Duplicate {
			dups++
		}
		if a.Partition != results[0].Partition || a.Offset != results[0].Offset {
			t.Fatalf("concurrent repeats got different positions: %+v", results)
		}
	}
	if dups != len(results)-1 {
		t.Errorf("%d of %d concurrent repeats were duplicates, want all but one", dups, len(results))
	}
}

func testDedupeWindow(t *testing.T, s *suite) {
	env := s.fakeEnv(t, Config{Policy: engine.GroupPolicy{DedupeWindow: time.Minute}})
	name := env.topic("window")
	env.create(engine.TopicConfig{Name: name, Partitions: 1})
	env.append(engine.Message{Topic: name, MsgID: "x"})
	env.clock.Advance(59 * time.Second)
	if a := env.append(engine.Message{Topic: name, MsgID: "x"}); !a.Duplicate || a.Offset != 0 {
		t.Fatalf("repeat within the window = %+v, want duplicate of offset 0", a)
	}
	env.clock.Advance(2 * time.Second)
	if a := env.append(engine.Message{Topic: name, MsgID: "x"}); a.Duplicate || a.Offset != 1 {
		t.Fatalf("repeat after the window = %+v, want a new record at offset 1", a)
	}
	if a := env.append(engine.Message{Topic: name, MsgID: "x"}); !a.Duplicate || a.Offset != 1 {
		t.Fatalf("repeat of the re-stored id = %+v, want duplicate of offset 1", a)
	}
}

func testDropOldest(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	name := env.topic("drop")
	env.create(engine.TopicConfig{Name: name, Partitions: 1, MaxMessages: 5, OnFull: engine.DropOldest})
	env.publish(name, 12, nil)
	p := env.info(name).Parts[0]
	if p.Earliest != 7 || p.Next != 12 || p.Dropped != 7 {
		t.Errorf("partition = %+v, want earliest 7, next 12, dropped 7", p)
	}
	recs, _ := env.read(name, 0, 0, 100)
	if got := join(dataOf(recs)); got != "7,8,9,10,11" {
		t.Errorf("retained %s, want 7..11", got)
	}
}

// blockedTopic makes a block-policy topic of two records that a group has
// not consumed: its member holds offset 0 unacked.
func blockedTopic(t *testing.T, env *env, timeout time.Duration) (topic string, held event, s *sink) {
	t.Helper()
	topic = env.topic("blocked")
	env.create(engine.TopicConfig{Name: topic, Partitions: 1, MaxMessages: 2, OnFull: engine.Block, BlockTimeout: timeout})
	s = newSink()
	env.join(engine.JoinRequest{Group: env.group("g"), Pattern: topic, Member: "m1"}, s.consumer("m1"))
	env.publish(topic, 2, nil)
	held = s.delivery(t, env.timeout)
	if held.d.Record.Offset != 0 {
		t.Fatalf("first delivery %v, want offset 0", held)
	}
	return topic, held, s
}

func testBlockBackpressure(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	const timeout = 100 * time.Millisecond
	topic, _, _ := blockedTopic(t, env, timeout)
	start := time.Now()
	_, err := env.e.Append(ctx(), engine.Message{Topic: topic, Data: []byte("late")})
	wantErr(t, "Append to a full block topic", err, engine.ErrBackpressure)
	if waited := time.Since(start); waited < timeout/2 {
		t.Errorf("Append failed after %v, want it to wait about the block timeout %v", waited, timeout)
	}
	if p := env.info(topic).Parts[0]; p.Next != 2 || p.Dropped != 0 {
		t.Errorf("partition after a refused append = %+v, want next 2, nothing dropped", p)
	}

	// A block topic no group reads is trimmed like drop_oldest.
	free := env.topic("unread")
	env.create(engine.TopicConfig{Name: free, Partitions: 1, MaxMessages: 2, OnFull: engine.Block, BlockTimeout: time.Hour})
	env.publish(free, 3, nil)
	if p := env.info(free).Parts[0]; p.Earliest != 1 || p.Next != 3 || p.Dropped != 1 {
		t.Errorf("unread block partition = %+v, want earliest 1, next 3, dropped 1", p)
	}
}

func testBlockFakeClock(t *testing.T, s *suite) {
	env := s.fakeEnv(t, Config{Policy: engine.GroupPolicy{AckTimeout: 100 * time.Hour}})
	topic, _, _ := blockedTopic(t, env, time.Minute)
	before := env.clock.Pending()
	done := make(chan error, 1)
	go func() {
		_, err := env.e.Append(context.Background(), engine.Message{Topic: topic})
		done <- err
	}()
	if !env.clock.WaitForTimers(before+1, env.timeout) {
		t.Fatalf("the blocked Append set no timer on the clock")
	}
	env.clock.Advance(30 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("Append returned %v before the block timeout passed on the clock", err)
	default:
	}
	env.clock.Advance(31 * time.Second)
	wantErr(t, "blocked Append after the block timeout", waitFor(t, done, env.timeout, "the blocked Append"), engine.ErrBackpressure)
}

func testBlockUnblocked(t *testing.T, s *suite) {
	env := s.env(t, Config{})
	topic, held, sk := blockedTopic(t, env, time.Hour)

	// It blocks: a short deadline runs out first.
	short, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	_, err := env.e.Append(short, engine.Message{Topic: topic})
	cancel()
	if err == nil {
		t.Fatalf("Append to a full block topic succeeded at once")
	}

	done := make(chan error, 1)
	go func() {
		_, err := env.e.Append(context.Background(), engine.Message{Topic: topic, Data: []byte("2")})
		done <- err
	}()
	env.ack(held)
	if err := waitFor(t, done, env.timeout, "the append to be unblocked by the ack"); err != nil {
		t.Fatalf("Append after the ack: %v", err)
	}
	p := env.info(topic).Parts[0]
	if p.Earliest != 1 || p.Next != 3 {
		t.Errorf("partition = %+v, want earliest 1 (the acked record trimmed), next 3", p)
	}
	// The group lost nothing: offset 1 comes next, not a skip.
	ev := sk.delivery(t, env.timeout)
	if ev.d.Record.Offset != 1 {
		t.Errorf("next delivery %v, want offset 1", ev)
	}
}

func testMaxAge(t *testing.T, s *suite) {
	env := s.fakeEnv(t, Config{})
	name := env.topic("age")
	env.create(engine.TopicConfig{Name: name, Partitions: 1, MaxAge: time.Minute})
	env.publish(name, 3, nil)
	env.clock.Advance(30 * time.Second)
	env.publish(name, 2, nil)
	env.clock.Advance(45 * time.Second) // the first three are 75 s old
	// Each way in trims: Read, then Topic, then Resolve.
	recs, next := env.read(name, 0, 0, 10)
	if got := offsetsOf(recs); !slices.Equal(got, []int64{3, 4}) || next != 5 {
		t.Errorf("Read = %v next %d, want [3 4] next 5", got, next)
	}
	env.clock.Advance(30 * time.Second) // 3 and 4 are 75 s old
	p := env.info(name).Parts[0]
	if p.Earliest != 5 || p.Next != 5 || p.Dropped != 5 {
		t.Errorf("partition = %+v, want earliest 5, next 5, dropped 5", p)
	}
	env.publish(name, 2, nil)
	env.clock.Advance(61 * time.Second)
	if off, _ := env.e.Resolve(ctx(), name, 0, engine.Start{Kind: engine.StartEarliest}); off != 7 {
		t.Errorf("earliest after expiry = %d, want 7", off)
	}
	if a := env.append(engine.Message{Topic: name}); a.Offset != 7 {
		t.Errorf("append after expiry got offset %d, want 7", a.Offset)
	}
}
