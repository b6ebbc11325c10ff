// Package enginetest is the conformance suite every engine.Engine
// implementation must pass before it counts. An implementation's tests call
// Run with a Factory that builds a fresh engine per test and a Features
// value declaring what the backend can do; tests that need a missing
// feature skip themselves and say why.
//
//	func TestConformance(t *testing.T) {
//		enginetest.Run(t, enginetest.Features{FakeClock: true}, func(t *testing.T, c enginetest.Config) engine.Engine {
//			e := memengine.New(memengine.Options{Clock: c.Clock, Defaults: c.Defaults, Strict: c.Strict, Policy: c.Policy})
//			t.Cleanup(func() { _ = e.Close(context.Background()) })
//			return e
//		})
//	}
//
// Every test uses topic and group names derived from its own name, so a
// factory may also hand out one shared engine where Config allows, except
// to the Close and Groups/SeekRacesClose tests, which close the engine
// they get.
//
// The package also provides FakeClock, a deterministic engine.Clock for any
// package's tests.
//
// # Concurrency
//
// Run must be called from the test's goroutine. The suite starts
// goroutines only inside individual tests (concurrent producers, blocked
// appends) and waits for them before the test ends. FakeClock is safe for
// concurrent use.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// Features declares how a backend differs from the full contract.
type Features struct {
	// FakeClock: the engine takes every time from Config.Clock: append
	// times, age retention, the dedupe window, ack timeouts, backoff and
	// block timeouts, so a FakeClock drives them. Tests of those rules
	// skip themselves without it.
	FakeClock bool
	// Timeout bounds each wait for an event; default 5 s. A backend behind
	// a network may need more.
	Timeout time.Duration
	// KnownDefects names rules (subtest paths below the suite, such as
	// "Groups/AcksAboveAHole/HandBackThenJoin") the engine is known to
	// break, each with why: they are skipped, saying so, unless
	// SWITCHYARD_KNOWN_DEFECTS=1 runs them. An entry is a defect to fix,
	// never a rule that does not apply.
	KnownDefects map[string]string
}

// skipKnown skips t when its rule is one of the engine's known defects.
func (s *suite) skipKnown(t *testing.T) {
	t.Helper()
	for rule, why := range s.f.KnownDefects {
		if strings.HasSuffix(t.Name(), "/"+rule) && os.Getenv("SWITCHYARD_KNOWN_DEFECTS") != "1" {
			t.Skipf("a known defect of this engine (%s); SWITCHYARD_KNOWN_DEFECTS=1 runs it", why)
		}
	}
}

// Config is what a test asks of the engine the Factory builds. Zero fields
// mean the implementation's defaults (engine.Defaults and
// engine.DefaultGroupPolicy, field by field).
type Config struct {
	// Clock, when not nil, is a *FakeClock the engine must use (only
	// passed when Features.FakeClock is set).
	Clock    engine.Clock
	Defaults engine.TopicConfig
	Strict   bool
	Policy   engine.GroupPolicy
}

// Factory returns a new engine configured by c. It registers a t.Cleanup
// that closes the engine; the suite may already have closed it.
type Factory func(t *testing.T, c Config) engine.Engine

// Run runs the conformance suite, one named subtest per rule.
func Run(t *testing.T, f Features, newEngine Factory) {
	if f.Timeout <= 0 {
		f.Timeout = 5 * time.Second
	}
	s := &suite{f: f, newEngine: newEngine}
	tests := []struct {
		name string
		run  func(*testing.T, *suite)
	}{
		{"Topics/CreateInspectDelete", testCreateInspectDelete},
		{"Topics/InvalidConfig", testInvalidConfig},
		{"Topics/DefaultsApplied", testDefaultsApplied},
		{"Topics/PagedInNameOrder", testTopicsPaged},
		{"Topics/PagedUnderChurn", testTopicsPagedUnderChurn},
		{"Groups/Paged", testGroupsPaged},
		{"Append/AutoCreate", testAutoCreate},
		{"Append/Strict", testStrict},
		{"Append/RecordFields", testRecordFields},
		{"Append/KeyOrderAndPartition", testKeyOrder},
		{"Append/ConcurrentOffsets", testConcurrentOffsets},
		{"Append/AsyncOrder", testAsyncAppendOrder},
		{"Append/AsyncErrors", testAsyncAppendErrors},
		{"Read/ClampAndLimit", testReadClamp},
		{"Read/Resolve", testResolve},
		{"Watch/EveryAppendOnceInOrder", testWatch},
		{"Dedupe/Duplicate", testDedupe},
		{"Dedupe/WindowExpires", testDedupeWindow},
		{"Retention/DropOldest", testDropOldest},
		{"Retention/BlockBackpressure", testBlockBackpressure},
		{"Retention/BlockTimeoutOnClock", testBlockFakeClock},
		{"Retention/BlockUnblockedByAck", testBlockUnblocked},
		{"Retention/MaxAge", testMaxAge},
		{"Groups/EveryGroupSeesEveryRecord", testEveryGroup},
		{"Groups/OneMemberPerRecord", testOneMemberPerRecord},
		{"Groups/StartLatestAndNewTopics", testStartLatest},
		{"Groups/NackRedelivers", testNack},
		{"Groups/AckTimeoutRedelivers", testAckTimeout},
		{"Groups/DeadLetterAfterMaxAttempts", testDeadLetter},
		{"Redrive/ToItsGroupOnly", testRedriveToGroupOnly},
		{"Redrive/QueueFullNeedsAppendToTopics", testRedriveQueueFull},
		{"Redrive/UnknownIDs", testRedriveUnknown},
		{"Redrive/TrimmedRecord", testRedriveTrimmed},
		{"Redrive/DeletedGroup", testRedriveDeletedGroup},
		{"Groups/SeekOffset", testSeekOffset},
		{"Groups/SeekTime", testSeekTime},
		{"Groups/SeekThenMemberChange", testSeekThenMemberChange},
		{"Groups/SeekWithoutMembers", testSeekWithoutMembers},
		{"Groups/RebalanceJoinLeave", testRebalance},
		{"Groups/LeaveHandsBack", testLeaveHandsBack},
		{"Groups/Conflict", testConflict},
		{"Groups/Filter", testFilter},
		{"Groups/RetentionSkipped", testRetentionSkipped},
		{"Groups/Errors", testGroupErrors},
		{"Groups/LateAckFromPreviousHolder", testLateAckFromPreviousHolder},
		{"Groups/LateAckAfterTimeout", testLateAckAfterTimeout},
		{"Groups/LateAckOfAttempt", testLateAckOfAttempt},
		{"Groups/SettleByMemberFamily", testSettleByMemberFamily},
		{"Groups/Window", testGroupWindow},
		{"Groups/MemberWindow", testMemberWindow},
		{"Groups/Delete", testDeleteGroup},
		{"Groups/IdleExpiry", testIdleExpiry},
		{"Groups/HandBack", testHandBack},
		{"Groups/AcksAboveAHole", testAcksAboveAHole},
		{"Retention/BlockNotHeldByIdleGroup", testIdleGroupDoesNotBlock},
		{"DeadLetters/QueueFull", testQueueFullLetters},
		{"DeadLetters/BoundedPerGroup", testDeadLettersBoundedPerGroup},
		{"DeadLetters/BoundedInAll", testDeadLettersBoundedInAll},
		{"DeadLetters/LargeRecord", testLargeRecordLetter},
		{"Retained/StoreReplaceRemove", testRetained},
		{"Retained/Bounds", testRetainedBounds},
		{"MQTTSessions/Ownership", testMQTTSessions},
		{"MQTTSessions/BoundsAndExpiry", testMQTTSessionBounds},
		{"MQTTSessions/Holds", testMQTTSessionHolds},
		{"MQTTSessions/Watch", testMQTTSessionWatch},
		{"MQTTSessions/Restore", testMQTTSessionRestore},
		{"Close", testClose},
		{"Groups/SeekRacesClose", testSeekRacesClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.skipKnown(t)
			tt.run(t, s)
		})
	}
}

type suite struct {
	f         Features
	newEngine Factory
}

// env is one test's engine and names.
type env struct {
	t       *testing.T
	e       engine.Engine
	clock   *FakeClock // nil unless the test asked for one
	base    string
	timeout time.Duration
}

// testStart is where fake clocks begin: a fixed, recognisable instant.
var testStart = time.Date(2026, 11, 29, 8, 0, 0, 0, time.UTC)

func (s *suite) env(t *testing.T, c Config) *env {
	t.Helper()
	return &env{t: t, e: s.newEngine(t, c), base: safeName(t.Name()), timeout: s.f.Timeout}
}

// fakeEnv builds an engine on a FakeClock, skipping when the backend
// cannot use one.
func (s *suite) fakeEnv(t *testing.T, c Config) *env {
	t.Helper()
	if !s.f.FakeClock {
		t.Skip("backend does not take its time from an injected clock (Features.FakeClock)")
	}
	clock := NewFakeClock(testStart)
	c.Clock = clock
	env := s.env(t, c)
	env.clock = clock
	return env
}

// safeName turns a test name into a valid topic segment.
func safeName(s string) string {
	b := []byte(s)
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			b[i] = '_'
		}
	}
	return string(b)
}

func (env *env) topic(suffix string) string { return env.base + "." + suffix }
func (env *env) group(suffix string) string { return env.base + "-" + suffix }

func ctx() context.Context { return context.Background() }

func (env *env) create(cfg engine.TopicConfig) engine.TopicInfo {
	env.t.Helper()
	info, err := env.e.CreateTopic(ctx(), cfg)
	if err != nil {
		env.t.Fatalf("CreateTopic(%+v): %v", cfg, err)
	}
	return info
}

func (env *env) append(m engine.Message) engine.Appended {
	env.t.Helper()
	a, err := env.e.Append(ctx(), m)
	if err != nil {
		env.t.Fatalf("Append(%s): %v", m.Topic, err)
	}
	return a
}

// publish appends n records data "0".."n-1", with key(i) when key is set.
func (env *env) publish(topic string, n int, key func(i int) string) []engine.Appended {
	env.t.Helper()
	out := make([]engine.Appended, n)
	for i := range n {
		m := engine.Message{Topic: topic, Data: fmt.Appendf(nil, "%d", i)}
		if key != nil {
			m.Key = key(i)
		}
		out[i] = env.append(m)
	}
	return out
}

func (env *env) info(topic string) engine.TopicInfo {
	env.t.Helper()
	info, err := env.e.Topic(ctx(), topic)
	if err != nil {
		env.t.Fatalf("Topic(%s): %v", topic, err)
	}
	return info
}

func (env *env) read(topic string, partition int, from int64, limit int) ([]*engine.Record, int64) {
	env.t.Helper()
	recs, next, err := env.e.Read(ctx(), topic, partition, from, limit)
	if err != nil {
		env.t.Fatalf("Read(%s/%d from %d): %v", topic, partition, from, err)
	}
	return recs, next
}

func (env *env) groupInfo(name string) engine.GroupInfo {
	env.t.Helper()
	g, err := env.e.Group(ctx(), name)
	if err != nil {
		env.t.Fatalf("Group(%s): %v", name, err)
	}
	return g
}

func (env *env) join(req engine.JoinRequest, c engine.Consumer) string {
	env.t.Helper()
	id, err := env.e.Join(ctx(), req, c)
	if err != nil {
		env.t.Fatalf("Join(%+v): %v", req, err)
	}
	if req.Member != "" && id != req.Member {
		env.t.Fatalf("Join returned member %q, asked for %q", id, req.Member)
	}
	return id
}

// memberOf returns the engine member ID of ev's consumer: its label after
// any "group/" prefix.
func memberOf(ev event) string {
	if i := strings.LastIndexByte(ev.member, '/'); i >= 0 {
		return ev.member[i+1:]
	}
	return ev.member
}

func (env *env) ack(ev event) {
	env.t.Helper()
	if err := env.e.Ack(ctx(), ev.d.Group, memberOf(ev), position(ev.d.Record)); err != nil {
		env.t.Fatalf("Ack(%s %v): %v", ev.d.Group, position(ev.d.Record), err)
	}
}

func (env *env) nack(ev event, reason string) {
	env.t.Helper()
	if err := env.e.Nack(ctx(), ev.d.Group, memberOf(ev), position(ev.d.Record), reason); err != nil {
		env.t.Fatalf("Nack(%s %v): %v", ev.d.Group, position(ev.d.Record), err)
	}
}

func position(r *engine.Record) engine.Position {
	return engine.Position{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset}
}

// wantErr fails unless err wraps target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: got error %v, want %v", what, err, target)
	}
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		<-tick.C
	}
}

// waitFor receives from ch or fails the test after timeout.
func waitFor[T any](t *testing.T, ch <-chan T, timeout time.Duration, what string) T {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case v := <-ch:
		return v
	case <-timer.C:
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
		panic("unreachable")
	}
}

// event is one Consumer callback: a delivery, or a skip when skip is set.
type event struct {
	member string
	d      engine.Delivery
	skip   *skipped
}

type skipped struct {
	group, topic string
	partition    int
	from, to     int64
}

func (ev event) String() string {
	if ev.skip != nil {
		return fmt.Sprintf("%s: skipped %s/%d [%d,%d)", ev.member, ev.skip.topic, ev.skip.partition, ev.skip.from, ev.skip.to)
	}
	r := ev.d.Record
	return fmt.Sprintf("%s: %s %s/%d@%d attempt %d", ev.member, ev.d.Group, r.Topic, r.Partition, r.Offset, ev.d.Attempt)
}

// sink collects the callbacks of any number of consumers into one
// unbounded queue, so Deliver never blocks. It is safe for concurrent use.
type sink struct {
	mu     sync.Mutex // guards q
	q      []event
	notify chan struct{} // capacity 1: "q may be non-empty"
}

func newSink() *sink { return &sink{notify: make(chan struct{}, 1)} }

func (s *sink) push(ev event) {
	s.mu.Lock()
	s.q = append(s.q, ev)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// consumer returns an engine.Consumer that reports to s as member.
func (s *sink) consumer(member string) engine.Consumer { return sinkConsumer{s, member} }

type sinkConsumer struct {
	s      *sink
	member string
}

func (c sinkConsumer) Deliver(d engine.Delivery) { c.s.push(event{member: c.member, d: d}) }

func (c sinkConsumer) Skipped(group, topic string, partition int, from, to int64) {
	c.s.push(event{member: c.member, skip: &skipped{group, topic, partition, from, to}})
}

func (s *sink) tryNext() (event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.q) == 0 {
		return event{}, false
	}
	ev := s.q[0]
	s.q = s.q[1:]
	return ev, true
}

// next returns the next event, failing the test after timeout.
func (s *sink) next(t *testing.T, timeout time.Duration) event {
	t.Helper()
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if ev, ok := s.tryNext(); ok {
			return ev
		}
		select {
		case <-s.notify:
		case <-timer.C:
			t.Fatalf("timed out after %v waiting for a delivery", timeout)
		}
	}
}

// delivery returns the next event, which must be a delivery.
func (s *sink) delivery(t *testing.T, timeout time.Duration) event {
	t.Helper()
	ev := s.next(t, timeout)
	if ev.skip != nil {
		t.Fatalf("got %v, want a delivery", ev)
	}
	return ev
}

// pending returns the queued events without waiting.
func (s *sink) pending() []event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.q)
}

// flow checks group deliveries on the clean path: per (group, topic,
// partition) at most maxInFlight records outstanding, all held by one
// member, delivered in offset order, each record once.
type flow struct {
	t           *testing.T
	maxInFlight int
	seen        map[string]string           // "group topic/partition@offset" -> member
	outstanding map[string]map[int64]string // "group topic/partition" -> offset -> member
	last        map[string]int64            // "group topic/partition" -> last delivered offset
}

// newFlow checks deliveries under the default policy (one in flight).
func newFlow(t *testing.T) *flow { return newFlowN(t, 1) }

func newFlowN(t *testing.T, maxInFlight int) *flow {
	return &flow{
		t: t, maxInFlight: maxInFlight,
		seen: map[string]string{}, outstanding: map[string]map[int64]string{}, last: map[string]int64{},
	}
}

func streamKey(group string, r *engine.Record) string {
	return fmt.Sprintf("%s %s/%d", group, r.Topic, r.Partition)
}

// deliver records ev, failing on a record of the stream held by another
// member, too many outstanding, a repeat or an out-of-order offset.
func (f *flow) deliver(ev event) {
	f.t.Helper()
	if ev.skip != nil {
		f.t.Fatalf("unexpected %v", ev)
	}
	r := ev.d.Record
	sk := streamKey(ev.d.Group, r)
	out := f.outstanding[sk]
	if out == nil {
		out = map[int64]string{}
		f.outstanding[sk] = out
	}
	for off, m := range out {
		if m != ev.member {
			f.t.Fatalf("%v while %s still holds offset %d of the stream", ev, m, off)
		}
	}
	if len(out) >= f.maxInFlight {
		f.t.Fatalf("%v with %d of the stream already outstanding (max %d)", ev, len(out), f.maxInFlight)
	}
	rk := fmt.Sprintf("%s@%d", sk, r.Offset)
	if m, ok := f.seen[rk]; ok {
		f.t.Fatalf("%v: already delivered to %s on the clean path", ev, m)
	}
	if last, ok := f.last[sk]; ok && r.Offset <= last {
		f.t.Fatalf("%v: out of order after offset %d", ev, last)
	}
	if ev.d.Attempt != 1 {
		f.t.Fatalf("%v: attempt %d on the clean path", ev, ev.d.Attempt)
	}
	f.seen[rk] = ev.member
	f.last[sk] = r.Offset
	out[r.Offset] = ev.member
}

func (f *flow) acked(ev event) {
	delete(f.outstanding[streamKey(ev.d.Group, ev.d.Record)], ev.d.Record.Offset)
}

// drain acks every delivery already queued, without waiting.
func (env *env) drain(s *sink, f *flow) {
	env.t.Helper()
	for {
		ev, ok := s.tryNext()
		if !ok {
			return
		}
		f.deliver(ev)
		env.ack(ev)
		f.acked(ev)
	}
}

// consume acks deliveries from s as they arrive until n more records have
// been delivered, checking them with f.
func (env *env) consume(s *sink, f *flow, n int) {
	env.t.Helper()
	for range n {
		ev := s.delivery(env.t, env.timeout)
		f.deliver(ev)
		env.ack(ev)
		f.acked(ev)
	}
}

func members(g engine.GroupInfo) []string {
	var ids []string
	for _, m := range g.Members {
		ids = append(ids, m.ID)
	}
	return ids
}

func dataOf(recs []*engine.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Data)
	}
	return out
}

func offsetsOf(recs []*engine.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

func join(ss []string) string { return strings.Join(ss, ",") }
