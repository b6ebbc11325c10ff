package jsengine

// Races and failures around the acknowledgement inbox (pipeline_ack.go):
// a close racing publishes, two inboxes on one connection, retries after
// no responders.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAckInboxCloseRacingPublishAnswered: every future publish hands out is
// answered exactly once, even when close runs while records are being
// published. Were close to answer what is pending and only then, in a
// second critical section, mark the inbox closed (pending = nil), a
// publish that registers its future between the two would be answered
// neither by close nor by its own timer (settle finds no entry in the nil
// map); failPending does both under one lock.
func TestAckInboxCloseRacingPublishAnswered(t *testing.T) {
	r := newAckRig(t)
	subj := "silent." + strconv.FormatInt(time.Now().UnixNano(), 36)
	sub, err := r.nc.SubscribeSync(subj) // holds every answer back
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)

	const rounds = 40
	lost := 0
	for round := 0; round < rounds && lost == 0; round++ {
		in, err := newAckInbox(r.nc)
		if err != nil {
			t.Fatal(err)
		}
		in.mu.Lock()
		in.timeout = 100 * time.Millisecond // a lost future is not even timed out
		in.mu.Unlock()
		// Many records pending make failAll's answering (between its
		// two critical sections) take a while.
		var fs []*ackFuture
		for range 3000 {
			f, err := in.publish(nats.NewMsg(subj))
			if err != nil {
				t.Fatal(err)
			}
			fs = append(fs, f)
		}
		var mu sync.Mutex
		stop := make(chan struct{})
		var wg sync.WaitGroup
		started := make(chan struct{}, 2)
		for range 2 {
			wg.Add(1)
			go func() { // exits when publish refuses (closed) or stop
				defer wg.Done()
				for i := 0; i < 1_000_000; i++ {
					select {
					case <-stop:
						return
					default:
					}
					f, err := in.publish(nats.NewMsg(subj))
					if err != nil {
						return
					}
					mu.Lock()
					fs = append(fs, f)
					mu.Unlock()
					if i == 0 {
						started <- struct{}{}
					}
				}
			}()
		}
		<-started
		<-started
		in.close(errors.New("closed"))
		close(stop)
		wg.Wait()
		in.watch() // the status channel is closed: returns at once
		deadline := time.After(5 * time.Second)
		for i, f := range fs {
			select {
			case <-f.Ok():
			case <-f.Err():
			case <-deadline:
				t.Errorf("round %d: future %d of %d published before close returned was never answered (inbox timeout %v)", round, i, len(fs), in.timeout)
				lost++
			}
			if lost > 0 {
				break
			}
		}
	}
}

// TestAckInboxTwoOnOneConnection: two inboxes on one connection (two
// engines sharing it), publishing alternately into one stream, each get
// the acknowledgements of their own records: the i-th publish is stored
// at sequence i+1, and its future says so.
func TestAckInboxTwoOnOneConnection(t *testing.T) {
	r := newAckRig(t)
	other, err := newAckInbox(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	defer other.close(errors.New("closed"))
	if other.prefix == r.in.prefix {
		t.Fatalf("two inboxes share the prefix %q", other.prefix)
	}
	var fs []*ackFuture
	for i := range 40 {
		in := r.in
		if i%2 == 1 {
			in = other
		}
		f, err := in.publish(nats.NewMsg(r.stream + ".x"))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	for i, f := range fs {
		a, err := answer(t, f)
		if err != nil || a.Sequence != uint64(i+1) {
			t.Fatalf("publish %d: %+v, %v; want sequence %d", i, a, err, i+1)
		}
	}
}

// TestAckInboxNoRespondersThenStream: records published before their
// stream exists get no responders; the stream is created meanwhile and
// the retries store them: each answered once, at a sequence of its own.
// Holds.
func TestAckInboxNoRespondersThenStream(t *testing.T) {
	r := newAckRig(t)
	js, err := jetstream.New(r.nc)
	if err != nil {
		t.Fatal(err)
	}
	name := "LATE" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var fs []*ackFuture
	for range 20 {
		f, err := r.in.publish(nats.NewMsg(name + ".x"))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	seen := map[uint64]bool{}
	for i, f := range fs {
		a, err := answer(t, f)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if seen[a.Sequence] {
			t.Fatalf("record %d answered with sequence %d, already another's", i, a.Sequence)
		}
		seen[a.Sequence] = true
	}
	info, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := info.Info(ctx); st == nil || st.State.Msgs != uint64(len(fs)) {
		t.Fatalf("stream holds %v, want %d records", st, len(fs))
	}
	if n := r.in.len(); n != 0 {
		t.Fatalf("%d records still pending", n)
	}
}
