package jsengine

// The acknowledgement inbox under answers out of publish order, repeated,
// stale and stray, with its futures' channels asked for while answers
// come, and records of mixed timeouts on its one timer.

import (
	"errors"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// silentSub holds the records published on a subject of its own and
// gives their reply subjects to the test.
func silentSub(t *testing.T, r *ackRig) (string, *nats.Subscription) {
	t.Helper()
	subj := "rvsilent." + strconv.FormatInt(time.Now().UnixNano(), 36)
	sub, err := r.nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	_ = sub.SetPendingLimits(-1, -1)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return subj, sub
}

// replies returns the reply subjects of n records held by sub, by the
// record index each record's data names.
func replies(t *testing.T, sub *nats.Subscription, n int) map[int]string {
	t.Helper()
	out := map[int]string{}
	for range n {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		i, err := strconv.Atoi(string(m.Data))
		if err != nil {
			t.Fatal(err)
		}
		out[i] = m.Reply
	}
	return out
}

func ackData(seq int) []byte {
	return []byte(`{"stream":"RV","seq":` + strconv.Itoa(seq) + `}`)
}

// TestAckInboxShuffledRepeatedStrayAnswers: every record gets its
// own answer, once, when the answers come in any order, repeated with
// other contents, mixed with answers for ids never sent and malformed
// ones, while other goroutines ask for the futures' channels.
func TestAckInboxShuffledRepeatedStrayAnswers(t *testing.T) {
	r := newAckRig(t)
	subj, sub := silentSub(t, r)
	const n = 300
	fs := make([]*ackFuture, n)
	for i := range n {
		m := nats.NewMsg(subj)
		m.Data = []byte(strconv.Itoa(i))
		f, err := r.in.publish(m)
		if err != nil {
			t.Fatal(err)
		}
		fs[i] = f
	}
	reply := replies(t, sub, n)
	// Waiters ask for the channels at random moments while the answers
	// come.
	type got struct {
		seq uint64
		err error
	}
	results := make([]got, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() { // exits when f is answered or after 15s
			defer wg.Done()
			f := fs[i]
			if i%3 == 0 {
				_ = f.Err()
			}
			select {
			case a := <-f.Ok():
				results[i] = got{seq: a.Sequence}
			case err := <-f.Err():
				results[i] = got{err: err}
			case <-time.After(15 * time.Second):
				results[i] = got{err: errors.New("no answer")}
			}
		}()
	}
	prefix := r.in.prefix
	order := rand.Perm(n)
	for k, i := range order {
		if err := r.nc.Publish(reply[i], ackData(i+1)); err != nil {
			t.Fatal(err)
		}
		// Strays: never sent, malformed, and a repeat of an answered one
		// with other contents.
		_ = r.nc.Publish(prefix+strconv.FormatUint(uint64(n+k+1000), 36), ackData(999999))
		_ = r.nc.Publish(prefix+"0"+strconv.FormatUint(uint64(i), 36), ackData(888888))
		_ = r.nc.Publish(prefix+"zzzzzzzzzzzzz", ackData(777777))
		if k > 0 {
			_ = r.nc.Publish(reply[order[k-1]], ackData(666666))
		}
	}
	wg.Wait()
	for i, g := range results {
		if g.err != nil || g.seq != uint64(i+1) {
			t.Fatalf("record %d answered with seq %d, %v; want seq %d", i, g.seq, g.err, i+1)
		}
	}
	// Every future answered once only.
	for i, f := range fs {
		select {
		case <-f.Ok():
			t.Fatalf("record %d answered twice", i)
		case <-f.Err():
			t.Fatalf("record %d answered on Err too", i)
		default:
		}
	}
	if l := r.in.len(); l != 0 {
		t.Fatalf("%d records pending", l)
	}
}

// TestAckInboxStaleAnswersAfterReconnect: answers to reply subjects
// of records failed by a reconnect do not answer the records published
// after it.
func TestAckInboxStaleAnswersAfterReconnect(t *testing.T) {
	r := newAckRig(t)
	subj, sub := silentSub(t, r)
	r.in.mu.Lock()
	r.in.timeout = time.Minute
	r.in.mu.Unlock()
	const n = 50
	var old []*ackFuture
	for i := range n {
		m := nats.NewMsg(subj)
		m.Data = []byte(strconv.Itoa(i))
		f, err := r.in.publish(m)
		if err != nil {
			t.Fatal(err)
		}
		old = append(old, f)
	}
	oldReply := replies(t, sub, n)
	r.in.failAll(nats.ErrDisconnected)
	for i, f := range old {
		if _, err := answer(t, f); !errors.Is(err, nats.ErrDisconnected) {
			t.Fatalf("old record %d: %v", i, err)
		}
	}
	var fresh []*ackFuture
	for i := range n {
		m := nats.NewMsg(subj)
		m.Data = []byte(strconv.Itoa(i))
		f, err := r.in.publish(m)
		if err != nil {
			t.Fatal(err)
		}
		fresh = append(fresh, f)
	}
	newReply := replies(t, sub, n)
	for i := range n {
		if oldReply[i] == newReply[i] {
			t.Fatalf("record %d after the reconnect reuses reply subject %q", i, oldReply[i])
		}
		_ = r.nc.Publish(oldReply[i], ackData(100000+i))
	}
	for i := range n {
		_ = r.nc.Publish(newReply[i], ackData(i+1))
	}
	for i, f := range fresh {
		a, err := answer(t, f)
		if err != nil || a.Sequence != uint64(i+1) {
			t.Fatalf("new record %d: %+v, %v", i, a, err)
		}
	}
}

// TestAckInboxMixedTimeouts: records of interleaved timeouts (short
// behind long, long behind short) are each answered by their own
// deadline, none before it, and the long ones stay pending.
func TestAckInboxMixedTimeouts(t *testing.T) {
	r := newAckRig(t)
	subj, _ := silentSub(t, r)
	timeouts := []time.Duration{time.Hour, 30 * time.Millisecond, 120 * time.Millisecond, time.Hour, 10 * time.Millisecond, 60 * time.Millisecond}
	type rec struct {
		f  *ackFuture
		d  time.Duration
		at time.Time
	}
	var recs []rec
	for i := range 120 {
		d := timeouts[rand.IntN(len(timeouts))]
		if i == 0 {
			d = time.Hour
		}
		r.in.mu.Lock()
		r.in.timeout = d
		r.in.mu.Unlock()
		f, err := r.in.publish(nats.NewMsg(subj))
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, rec{f: f, d: d, at: f.deadline})
		if i%10 == 0 {
			time.Sleep(5 * time.Millisecond) // spreads the deadlines
		}
	}
	long := 0
	for i, x := range recs {
		if x.d == time.Hour {
			long++
			continue
		}
		_, err := answer(t, x.f)
		now := time.Now()
		if !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
			t.Fatalf("record %d (timeout %v): %v", i, x.d, err)
		}
		if now.Before(x.at) {
			t.Fatalf("record %d answered before its deadline", i)
		}
	}
	for i, x := range recs {
		if _, _, ok := answerOf(x.f); x.d == time.Hour && ok {
			t.Fatalf("record %d with an hour's timeout answered", i)
		}
	}
	if l := r.in.len(); l != long {
		t.Fatalf("%d pending, want %d", l, long)
	}
}

// TestAckInboxWakeNotLost: a reader that checks each record's
// answer in publish order and waits on the inbox's wake channel (as the
// ack reader does) is woken for every answer, while records are published
// and other goroutines ask for the futures' channels meanwhile.
func TestAckInboxWakeNotLost(t *testing.T) {
	r := newAckRig(t)
	const n = 2000
	fs := make(chan *ackFuture, n)
	pubErr := make(chan error, 1)
	go func() { // exits after n publishes
		defer close(fs)
		for i := range n {
			m := nats.NewMsg(r.stream + ".w")
			m.Data = []byte(strconv.Itoa(i))
			f, err := r.in.publish(m)
			if err != nil {
				pubErr <- err
				return
			}
			if i%7 == 0 {
				go func() { _ = f.Ok() }() // exits at once
			}
			fs <- f
		}
	}()
	i := 0
	for f := range fs {
		for {
			if _, _, ok := answerOf(f); ok {
				break
			}
			select {
			case <-r.in.wake:
			case <-time.After(10 * time.Second):
				t.Fatalf("record %d: no wake in 10s; answered: %v", i, f.done.Load())
			}
		}
		a, err, _ := answerOf(f)
		if err != nil || a.Sequence != uint64(i+1) {
			t.Fatalf("record %d: %+v, %v", i, a, err)
		}
		i++
	}
	select {
	case err := <-pubErr:
		t.Fatal(err)
	default:
	}
	if i != n {
		t.Fatalf("%d records read, want %d", i, n)
	}
}
