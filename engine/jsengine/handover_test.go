package jsengine_test

// Tests of the hand-over of a group partition between nodes: claims and
// releases racing with members coming and going, Close and Seek.

import (
	"cmp"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestClaimOvertakenKeepsAcksAboveAHole: a node whose member stops owning
// a partition while the node's claim on it is being written (the member
// leaves, or a gateway shutting down hands it back, as happens while
// gateways restart one at a time) releases the partition as soon as the
// claim lands. That release must carry what the claim read (the leases and
// the acks above the unacked record); the node that takes the partition
// over then delivers the unacked record again, with its attempt counted
// on, and none of the acked ones.
func TestClaimOvertakenKeepsAcksAboveAHole(t *testing.T) {
	for _, tc := range []struct {
		name     string
		handBack bool
	}{{"Leave", false}, {"HandBack", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
			a := newNode(t, o)
			b := newNode(t, o)
			gate := newGate(b, "")
			leaveAHole(t, a, "hole", "g", "m1")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// m2 on b: m1 still owns the only partition.
			if _, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "hole", Member: "m2", MaxInFlight: holeRecords}, newManual()); err != nil {
				t.Fatal(err)
			}
			gate.armed.Store(true) // b's next position write, its claim, waits
			if err := a.Leave(ctx, "g", "m1"); err != nil {
				t.Fatalf("Leave m1: %v", err)
			}
			gate.waitBlocked(t, ctx, "b's claim")
			var err error
			if tc.handBack {
				err = b.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m2"}})
			} else {
				err = b.Leave(ctx, "g", "m2")
			}
			if err != nil {
				t.Fatalf("m2 going: %v", err)
			}
			before, err := a.StoredPosition(ctx, "g", "hole", 0) // a's release
			if err != nil {
				t.Fatal(err)
			}
			close(gate.release) // the claim lands after m2 went
			// b releases the partition it just claimed.
			var released string
			waitUntil(t, "b to release the partition it claimed", func() bool {
				released, err = a.StoredPosition(ctx, "g", "hole", 0)
				return err == nil && released != before && !strings.Contains(released, `"holder"`)
			})
			t.Logf("released by a: %s", before)
			t.Logf("released by b: %s", released)
			takeOver(t, a, "hole", "g", "m3")
		})
	}
}

// gateKV holds back the first Update of a group position (of a key
// starting with prefix, when set) once armed, telling blocked, until
// release is closed.
type gateKV struct {
	jetstream.KeyValue
	prefix  string
	armed   *atomic.Bool
	blocked chan struct{}
	release chan struct{}
}

// newGate returns a gate for the positions whose keys start with prefix
// ("": every position) and wraps e's buckets with it.
func newGate(e *jsengine.Engine, prefix string) *gateKV {
	g := &gateKV{prefix: cmp.Or(prefix, "c."), armed: new(atomic.Bool), blocked: make(chan struct{}), release: make(chan struct{})}
	e.WrapBuckets(func(kv jetstream.KeyValue) jetstream.KeyValue {
		return &gateKV{KeyValue: kv, prefix: g.prefix, armed: g.armed, blocked: g.blocked, release: g.release}
	})
	return g
}

// waitBlocked waits until the gate holds a write back.
func (kv *gateKV) waitBlocked(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-kv.blocked:
	case <-ctx.Done():
		t.Fatalf("%s was never written", what)
	}
}

func (kv *gateKV) Update(ctx context.Context, key string, value []byte, last uint64) (uint64, error) {
	if strings.HasPrefix(key, kv.prefix) && kv.armed.CompareAndSwap(true, false) {
		close(kv.blocked)
		select {
		case <-kv.release:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return kv.KeyValue.Update(ctx, key, value, last)
}

// TestLastAttemptNotDeliveredAgain: a record whose last attempt ends
// without an ack because its member goes (it leaves, or a gateway shutting
// down hands it back and closes) is dead-lettered; the member that takes
// the partition over next, on this node or another, must not get it
// again: it would be both dead-lettered and delivered (and perhaps acked).
func TestLastAttemptNotDeliveredAgain(t *testing.T) {
	for _, tc := range []struct {
		name  string
		close bool
	}{{"LeaveThenJoin", false}, {"HandBackThenClose", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{MaxAttempts: 1, AckTimeout: time.Hour}}}
			a := newNode(t, o)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "last", Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			m1 := joinManual(t, ctx, a, "g", "last", "m1")
			if _, err := a.Append(ctx, engine.Message{Topic: "last", Data: []byte(`"poison"`)}); err != nil {
				t.Fatal(err)
			}
			if d := m1.next(t, 20*time.Second); d.Record.Offset != 0 || d.Attempt != 1 {
				t.Fatalf("m1 got offset %d attempt %d, want offset 0 attempt 1", d.Record.Offset, d.Attempt)
			}
			next := a
			if tc.close {
				if err := a.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m1"}}); err != nil {
					t.Fatalf("HandBack: %v", err)
				}
				if err := a.Close(ctx); err != nil {
					t.Fatalf("Close: %v", err)
				}
				next = newNode(t, o)
			} else if err := a.Leave(ctx, "g", "m1"); err != nil {
				t.Fatalf("Leave: %v", err)
			}
			m2 := joinManual(t, ctx, next, "g", "last", "m2")
			if _, err := next.Append(ctx, engine.Message{Topic: "last", Data: []byte(`"marker"`)}); err != nil {
				t.Fatal(err)
			}
			d := m2.next(t, 20*time.Second)
			if d.Record.Offset != 1 {
				t.Fatalf("m2 got offset %d attempt %d, want the marker (offset 1): a record whose last attempt had ended came again",
					d.Record.Offset, d.Attempt)
			}
			if err := next.Ack(ctx, "g", "m2", posOf(d.Record)); err != nil {
				t.Fatal(err)
			}
			// Committed past the marker: every letter of offset 0 is stored
			// (by the one letter writer of the node, in turn).
			waitUntil(t, "the group to commit both records", func() bool {
				info, err := next.Group(ctx, "g")
				return err == nil && len(info.Partitions) == 1 && info.Partitions[0].Committed == 2
			})
			dls, err := next.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
			if err != nil {
				t.Fatal(err)
			}
			// On one node the letter is stored once; a node closing while
			// it stores one leaves the next holder to store it again.
			if len(dls) == 0 || dls[0].Record.Offset != 0 || !tc.close && len(dls) != 1 {
				t.Fatalf("dead letters %+v, want offset 0's (once when the node stays up)", dls)
			}
		})
	}
}

// TestRejoinBeforeReleaseKeepsLastAck: a member is handed back and another
// joins the same node before the release is written (the committer is
// held up by a write of another partition, as by a slow round). The new
// member's claim must start from what was handed back, not from the last
// position written: a record acked since that write, above one not acked,
// must not come again. This is the conformance suite's
// Groups/AcksAboveAHole/HandBackThenJoin with the committer's timing made
// certain.
func TestRejoinBeforeReleaseKeepsLastAck(t *testing.T) {
	url := natstest.URL(t)
	a := newNode(t, nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}})
	gate := newGate(a, jsengine.PositionKeyPrefix("g", "ho.b"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, name := range []string{"ho.a", "ho.b"} {
		if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: name, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
	}
	m1 := newManual()
	if _, err := a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "ho.*", Member: "m1", MaxInFlight: holeRecords}, m1); err != nil {
		t.Fatal(err)
	}
	appendN(t, ctx, a, "ho.a", holeRecords)
	var last engine.Delivery
	for range holeRecords {
		switch d := m1.next(t, 20*time.Second); d.Record.Offset {
		case 0: // the hole: never acked
		case holeRecords - 1:
			last = d // acked once the committer is held up
		default:
			if err := a.Ack(ctx, "g", "m1", posOf(d.Record)); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitUntil(t, "the acks to be written", func() bool {
		v, err := a.StoredPosition(ctx, "g", "ho.a", 0)
		return err == nil && strings.Contains(v, `"done":[[1,9]]`)
	})
	gate.armed.Store(true)
	// ho.b's record is written as an attempt before it is delivered: the
	// gate holds that write, and the committer's round with it.
	if _, err := a.Append(ctx, engine.Message{Topic: "ho.b", Data: []byte(`"b"`)}); err != nil {
		t.Fatal(err)
	}
	gate.waitBlocked(t, ctx, "ho.b's attempt")
	if err := a.Ack(ctx, "g", "m1", posOf(last.Record)); err != nil {
		t.Fatal(err)
	}
	if err := a.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m1"}}); err != nil {
		t.Fatalf("HandBack: %v", err)
	}
	m2 := newManual()
	if _, err := a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "ho.*", Member: "m2", MaxInFlight: holeRecords}, m2); err != nil {
		t.Fatal(err)
	}
	close(gate.release)
	if _, err := a.Append(ctx, engine.Message{Topic: "ho.a", Data: []byte(`"marker"`)}); err != nil {
		t.Fatal(err)
	}
	var again []int64
	for hole, marker, b := false, false, false; !hole || !marker || !b; {
		d := m2.next(t, 20*time.Second)
		switch off := d.Record.Offset; {
		case d.Record.Topic == "ho.b":
			b = true
		case off == 0:
			hole = true
			if d.Attempt != 2 {
				t.Errorf("the unacked record came again with attempt %d, want 2", d.Attempt)
			}
		case off == holeRecords:
			marker = true
		default:
			again = append(again, off)
		}
		if err := a.Ack(ctx, "g", "m2", posOf(d.Record)); err != nil {
			t.Fatalf("ack %s@%d: %v", d.Record.Topic, d.Record.Offset, err)
		}
	}
	if len(again) > 0 {
		t.Errorf("records acked above an unacked one were delivered again: offsets %v", again)
	}
}

// TestReleaseKeepsSeek: a Seek made while a node's release of the
// partition is still to be written (its member was handed back), on that
// node or another, must survive the release: the next member starts at
// the offset sought, not where the released member had got to.
func TestReleaseKeepsSeek(t *testing.T) {
	for _, tc := range []struct {
		name  string
		other bool
	}{{"SeekHere", false}, {"SeekOnAnotherNode", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
			a, b := twoNodes(t, o)
			gate := newGate(a, "")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "sk", Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			m1 := joinManual(t, ctx, a, "g", "sk", "m1")
			appendN(t, ctx, a, "sk", 5)
			ackNext(t, ctx, a, "g", "m1", m1, 5)
			waitUntil(t, "the acks to be written", func() bool {
				v, err := a.StoredPosition(ctx, "g", "sk", 0)
				return err == nil && strings.Contains(v, `"off":5,`)
			})
			gate.armed.Store(true)
			if err := a.HandBack(ctx, []engine.MemberRef{{Group: "g", Member: "m1"}}); err != nil {
				t.Fatalf("HandBack: %v", err)
			}
			gate.waitBlocked(t, ctx, "the release")
			seeker := a
			if tc.other {
				seeker = b
				waitUntil(t, "b to know the group", func() bool {
					info, err := b.Group(ctx, "g")
					return err == nil && len(info.Partitions) == 1 && info.Partitions[0].Committed == 5
				})
			}
			if err := seeker.Seek(ctx, "g", "sk", 0, engine.Start{Kind: engine.StartOffset, Offset: 2}); err != nil {
				t.Fatalf("Seek: %v", err)
			}
			close(gate.release)
			var v string
			waitUntil(t, "the partition to be released", func() bool {
				var err error
				v, err = a.StoredPosition(ctx, "g", "sk", 0)
				return err == nil && !strings.Contains(v, `"holder"`)
			})
			t.Logf("released: %s", v)
			m2 := joinManual(t, ctx, a, "g", "sk", "m2")
			if _, err := a.Append(ctx, engine.Message{Topic: "sk", Data: []byte(`"marker"`)}); err != nil {
				t.Fatal(err)
			}
			if d := m2.next(t, 20*time.Second); d.Record.Offset != 2 {
				t.Fatalf("after a Seek to 2 the next member got offset %d first", d.Record.Offset)
			}
		})
	}
}

// TestQuickClaimThenReleaseKeepsAttempts: a node that claims a partition
// and lets it go again (its member leaves, or it closes) before its window
// has reached the leased records (they are being fetched) must hand their
// attempts back with them: the next member gets each with its attempt
// counted on, not as a first attempt.
func TestQuickClaimThenReleaseKeepsAttempts(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name  string
		close bool
	}{{"Leave", false}, {"Close", true}} {
		t.Run(tc.name, func(t *testing.T) {
			url := natstest.URL(t)
			o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			a := newNode(t, o)
			if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "quick", Partitions: 1}); err != nil {
				t.Fatal(err)
			}
			m1 := newManual()
			if _, err := a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "quick", Member: "m1", MaxInFlight: n}, m1); err != nil {
				t.Fatal(err)
			}
			appendN(t, ctx, a, "quick", n)
			for range n {
				m1.next(t, 20*time.Second) // leased, never acked
			}
			if err := a.Close(ctx); err != nil {
				t.Fatalf("Close a: %v", err)
			}
			// b and c start after the records were appended: their tails do
			// not bring them, so a claim fetches them.
			b, c := twoNodes(t, o)
			var before string
			waitUntil(t, "a's release", func() bool {
				var err error
				before, err = c.StoredPosition(ctx, "g", "quick", 0)
				return err == nil && strings.Contains(before, `"leases"`) && !strings.Contains(before, `"holder"`)
			})
			if _, err := b.Topics(ctx); err != nil { // b learns where the partition ends
				t.Fatal(err)
			}
			fetching, unblock := make(chan struct{}, 1), make(chan struct{})
			defer close(unblock)
			b.SetBeforeGroupFetch(func() {
				select {
				case fetching <- struct{}{}:
				default:
				}
				select {
				case <-unblock:
				case <-ctx.Done():
				}
			})
			if _, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "quick", Member: "m2", MaxInFlight: n}, newManual()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-fetching:
			case <-ctx.Done():
				t.Fatal("b never fetched the records it claimed")
			}
			closed := make(chan error, 1)
			if tc.close {
				go func() { closed <- b.Close(ctx) }()
			} else if err := b.Leave(ctx, "g", "m2"); err != nil {
				t.Fatalf("Leave: %v", err)
			}
			var released string
			waitUntil(t, "b's release", func() bool {
				var err error
				released, err = c.StoredPosition(ctx, "g", "quick", 0)
				return err == nil && released != before && !strings.Contains(released, `"holder"`)
			})
			t.Logf("released by a: %s", before)
			t.Logf("released by b: %s", released)
			if tc.close {
				unblock <- struct{}{}
				if err := <-closed; err != nil {
					t.Fatalf("Close b: %v", err)
				}
			}
			m3 := newManual()
			if _, err := c.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "quick", Member: "m3", MaxInFlight: n}, m3); err != nil {
				t.Fatal(err)
			}
			for range n {
				if d := m3.next(t, 20*time.Second); d.Attempt != 2 {
					t.Errorf("offset %d came again with attempt %d, want 2", d.Record.Offset, d.Attempt)
				}
			}
		})
	}
}

// TestFreshNodeDeliversBacklog: a node started after a partition's last
// append (a gateway restarted while the topic is quiet) must deliver the
// records its group still owes there to a member that joins it, without
// waiting for another append.
func TestFreshNodeDeliversBacklog(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a := newNode(t, o)
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: "quiet", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "quiet", Member: "m1", MaxInFlight: 3}, newManual()); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close a: %v", err)
	}
	w := newNode(t, o)
	const n = 3
	appendN(t, ctx, w, "quiet", n)
	b := newNode(t, o) // started after the last append
	m2 := newManual()
	if _, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "quiet", Member: "m2", MaxInFlight: n}, m2); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if d := m2.next(t, 10*time.Second); d.Record.Offset != int64(i) {
			t.Fatalf("got offset %d, want %d", d.Record.Offset, i)
		}
	}
}

// TestClaimLandingAfterCloseKeepsLeases: a claim still being written when
// its node closes lands after Close has written its releases and left the
// registry, naming a node that is gone. The next node takes the partition
// over as from a holder that died, and must still continue the attempts
// and keep the acks above the unacked record that the claim read.
func TestClaimLandingAfterCloseKeepsLeases(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{AckTimeout: time.Hour}}}
	a := newNode(t, o)
	leaveAHole(t, a, "hole", "g", "m1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.Close(ctx); err != nil {
		t.Fatalf("Close a: %v", err)
	}
	b, c := twoNodes(t, o)
	gate := newGate(b, "")
	gate.armed.Store(true) // b's claim waits
	if _, err := b.Join(ctx, engine.JoinRequest{Group: "g", Pattern: "hole", Member: "m2", MaxInFlight: holeRecords}, newManual()); err != nil {
		t.Fatal(err)
	}
	gate.waitBlocked(t, ctx, "b's claim")
	closed := make(chan error, 1)
	go func() { closed <- b.Close(ctx) }()
	// Close deletes its members' keys after writing its releases.
	waitUntil(t, "b's member to leave the registry", func() bool {
		info, err := c.Group(ctx, "g")
		return err == nil && len(info.Members) == 0
	})
	close(gate.release) // the claim lands now
	if err := <-closed; err != nil {
		t.Fatalf("Close b: %v", err)
	}
	takeOver(t, c, "hole", "g", "m3")
}
