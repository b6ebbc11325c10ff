package jsengine

// The acknowledgement inbox's one timer (pipeline_ack.go): records time
// out by their own deadlines, whatever waits before them.

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestAckInboxTimerShorterTimeoutAfterLonger: a record published with a
// short timeout behind one with a long timeout is answered by its own
// deadline, not the other's; the other stays pending; every record of a
// burst with a short timeout is answered and none is left.
func TestAckInboxTimerShorterTimeoutAfterLonger(t *testing.T) {
	r := newAckRig(t)
	subj := "silent." + strconv.FormatInt(time.Now().UnixNano(), 36)
	sub, err := r.nc.SubscribeSync(subj) // holds every answer back
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	_ = sub.SetPendingLimits(-1, -1)

	setTimeout := func(d time.Duration) {
		r.in.mu.Lock()
		r.in.timeout = d
		r.in.mu.Unlock()
	}
	setTimeout(time.Hour)
	long, err := r.in.publish(nats.NewMsg(subj))
	if err != nil {
		t.Fatal(err)
	}
	setTimeout(50 * time.Millisecond)
	var short []*ackFuture
	for range 200 {
		f, err := r.in.publish(nats.NewMsg(subj))
		if err != nil {
			t.Fatal(err)
		}
		short = append(short, f)
	}
	for i, f := range short {
		if _, err := answer(t, f); !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("record %d answered with %v, want %v", i, err, jetstream.ErrAsyncPublishTimeout)
		}
	}
	if _, _, ok := answerOf(long); ok {
		t.Fatal("the record with an hour's timeout was answered")
	}
	if n := r.in.len(); n != 1 {
		t.Fatalf("%d records pending, want 1", n)
	}
	// The inbox's order is kept for the next records: one published now
	// is answered by the server at its place.
	setTimeout(time.Hour)
	f, err := r.in.publish(nats.NewMsg(r.stream + ".y"))
	if err != nil {
		t.Fatal(err)
	}
	if a, err := answer(t, f); err != nil || a.Sequence != 1 {
		t.Fatalf("record after the timeouts: %+v, %v", a, err)
	}
}

// TestAckInboxAnswerOfWithoutChannels: the ack reader's way of reading an
// answer (answerOf, without the future's channels) and the channels made
// after the answer give the same answer, once.
func TestAckInboxAnswerOfWithoutChannels(t *testing.T) {
	r := newAckRig(t)
	f, err := r.in.publish(nats.NewMsg(r.stream + ".x"))
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.After(15 * time.Second)
	for {
		if _, _, ok := answerOf(f); ok {
			break
		}
		select {
		case <-r.in.wake:
		case <-deadline:
			t.Fatal("no answer")
		}
	}
	a, err, _ := answerOf(f)
	if err != nil || a.Sequence != 1 {
		t.Fatalf("answerOf: %+v, %v", a, err)
	}
	if b, err := answer(t, f); err != nil || b != a {
		t.Fatalf("Ok after the answer: %+v, %v; want %+v", b, err, a)
	}
	select {
	case <-f.Ok():
		t.Fatal("answered twice on Ok")
	case <-f.Err():
		t.Fatal("answered on Err too")
	default:
	}
}
