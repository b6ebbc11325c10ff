package jsengine_test

import (
	"context"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestCutOffNodeDoesNotRedeliverAckedElsewhere: node A, whose member
// holds a lease on a record, is cut off NATS both ways (its link silent,
// not closed: the isolate-gateway fault scenario); its live keys expire,
// node B takes the partition over and B's member gets the record and acks
// it (above an unacked one), the ack acknowledged. A must not deliver that record to its own
// member again, neither while cut off nor once the link heals, its
// connection closed meanwhile (the servers drop a client that misses two
// pings) and made again (docs/faults.md, "Known defects" 3). It passes:
// it does not reproduce that defect, seen in the isolate-gateway fault
// scenario two runs in six, whose cause is not found yet; it guards the
// paths it does take (A's leases timing out cut off, or just after the
// heal, on one server and on three).
func TestCutOffNodeDoesNotRedeliverAckedElsewhere(t *testing.T) {
	// A's leases time out while it is cut off (3 s), or just after it is
	// back (6 s); each on one server and on a cluster of three.
	for _, ackTimeout := range []time.Duration{3 * time.Second, 6 * time.Second} {
		t.Run("one server/"+ackTimeout.String(), func(t *testing.T) {
			url := natstest.URL(t)
			px := newLinkProxy(t, url)
			policy := engine.GroupPolicy{AckTimeout: ackTimeout, MaxAttempts: 100, MaxInFlight: 8}
			o := nodeOpts{prefix: natstest.Prefix(t, url), ttl: 2 * time.Second, c: enginetest.Config{Policy: policy}}
			oa, ob := o, o
			oa.url, ob.url = px.URL(), url
			testCutOffRedelivery(t, px, newNode(t, oa), newNode(t, ob), policy)
		})
		t.Run("three servers/"+ackTimeout.String(), func(t *testing.T) {
			c := natstest.NewCluster(t, 3)
			px := newLinkProxy(t, c.URL(0))
			policy := engine.GroupPolicy{AckTimeout: ackTimeout, MaxAttempts: 100, MaxInFlight: 8}
			open := func(url string) *jsengine.Engine {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				e, err := jsengine.New(ctx, jsengine.Options{URL: url, Prefix: "cutoff", Replicas: 3, MemberTTL: 2 * time.Second, Policy: policy})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { closeEngine(t, e) })
				return e
			}
			testCutOffRedelivery(t, px, open(px.URL()), open(c.URLs(1)), policy)
		})
	}
}

func testCutOffRedelivery(t *testing.T, px *linkProxy, a, b *jsengine.Engine, policy engine.GroupPolicy) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const topic = "cutoff"
	if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m1 := joinManual(t, ctx, a, "g", topic, "m1") // sorts first: holds the partition
	for range 2 {
		if _, err := b.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"job"`)}); err != nil {
			t.Fatal(err)
		}
	}
	for want := range int64(2) {
		if d := m1.next(t, 20*time.Second); d.Record.Offset != want {
			t.Fatalf("m1 got offset %d, want %d", d.Record.Offset, want)
		}
	}
	m2 := joinManual(t, ctx, b, "g", topic, "m2")
	px.Hold()
	cut := time.Now()
	// Once A's keys expired, B took over and delivers both again; its
	// member acks offset 1 only, above the hole of offset 0 (as in the
	// fault scenario, where the committed offset had not passed it).
	for range 2 {
		d := m2.next(t, 30*time.Second)
		if d.Record.Offset != 1 {
			continue
		}
		if err := b.Ack(ctx, "g", "m2", posOf(d.Record)); err != nil {
			t.Fatal(err)
		}
	}
	acked := time.Now()
	t.Logf("B's member acked offset 1 %v into the cut", acked.Sub(cut))
	redelivered := func(phase string, until time.Time) {
		for {
			select {
			case d := <-m1.q:
				t.Logf("%s: A delivered offset %d (attempt %d) %v after the ack", phase, d.Record.Offset, d.Attempt, time.Since(acked))
				if d.Record.Offset == 1 {
					t.Errorf("%s: A delivered offset 1 again (attempt %d) %v after B's member's ack of it was acknowledged",
						phase, d.Attempt, time.Since(acked))
				}
			case <-time.After(time.Until(until)):
				return
			}
		}
	}
	// Healed 4 s after the cut: A's leases have timed out (3 s), or not
	// yet (6 s); then past the ack timeout twice.
	redelivered("cut off", cut.Add(4*time.Second))
	px.Reset() // the server dropped A's silent connection: A connects again
	healed := time.Now()
	redelivered("healed", healed.Add(2*policy.AckTimeout))
}
