package jsengine

// Acknowledgements of chained records. A chained record (pipeline.go) is
// published with core NATS, with a reply subject under one wildcard
// subscription of the engine's own (ackInbox), instead of through
// nats.go's PublishMsgAsync: nats.go decodes every acknowledgement with
// encoding/json and arms a timer per publish in a map of its own, which
// was a sixth of a gateway's CPU under a publish load. The inbox keeps
// what nats.go's asynchronous publisher gave the chain:
//
//   - An acknowledgement answers the record whose reply subject it came
//     on, through a jetstream.PubAckFuture, which the ack reader reads in
//     publish order as before (without the future's channels: it checks
//     the answer and waits on the inbox's wake channel, signalled after
//     every answer).
//   - It is decoded as nats.go decodes it (decodePubAck): a PubAck, the
//     server's *jetstream.APIError (so refusals are told apart as
//     before), or jetstream.ErrInvalidJSAck.
//   - A "no responders" status is retried after
//     jetstream.DefaultPubRetryWait, at most
//     jetstream.DefaultPubRetryAttempts times, then answered with
//     jetstream.ErrNoStreamResponse.
//   - A record not answered within pipelineAckTimeout of its publish is
//     answered with jetstream.ErrAsyncPublishTimeout.
//   - When the connection starts reconnecting or closes, every record
//     waiting for its acknowledgement is answered with
//     nats.ErrDisconnected (its outcome unknown).
//
// Batches and records with a MsgID still publish through nats.go.
//
// Lock order: ackInbox.mu is taken last (publish runs under
// partition.amu and Engine.wmu; the subscription's callback, the one
// deadline timer (expire) and the no-responders retry timers take it
// alone, and call nothing under it but sends into a future's buffered
// channels, made only when someone asked for them, and the non-blocking
// signal on wake: none of them waits).
//
// Concurrency: ackInbox is safe for concurrent use; its status goroutine
// (watch, started by setup) exits when shutdown closes the inbox or the
// connection closes.

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackInbox routes the acknowledgements of chained records to their
// futures.
//
// Its records wait in q in publish order, a record's id being its place
// in that order (base is q[0]'s); an answered record leaves a nil behind,
// and q starts at the oldest record not answered. One timer (timer)
// times them out: it fires at q[0]'s deadline or before, answers every
// record past its deadline and is set again for the earliest one left.
// (A timer per record, and a map from reply subject to future, cost more
// than the rest of the inbox under a publish load.)
type ackInbox struct {
	nc     *nats.Conn
	prefix string // reply subjects are prefix + id in base 36
	sub    *nats.Subscription
	status chan nats.Status
	// wake gets a token (when it has none) after each answer, for the
	// engine's ack reader to wait on (readAcks).
	wake chan struct{}
	// stream is the stream the last acknowledgement named; used by
	// handle only, which nats.go calls for one message at a time.
	stream string

	mu sync.Mutex // guards following
	// timeout bounds the wait for an acknowledgement: pipelineAckTimeout
	// (tests shorten it).
	timeout time.Duration
	base    uint64       // id of q[0]
	q       []*ackFuture // by id from base; nil once answered; q[0] is not
	waiting int          // records in q not answered
	closed  bool
	timer   *time.Timer // answers records past their deadline (expire); made by the first publish
	timerAt time.Time   // when timer fires; zero when it is not set
}

// ackFuture is one chained record's acknowledgement; it implements
// jetstream.PubAckFuture. It is answered once: ack or err is set, then
// done; Ok and Err give it as nats.go's futures do (exactly one of them
// receives a value), through channels made when first asked for.
type ackFuture struct {
	msg      *nats.Msg
	id       uint64
	deadline time.Time // answered with jetstream.ErrAsyncPublishTimeout past it
	done     atomic.Bool
	ack      *jetstream.PubAck // set before done
	err      error             // set before done

	retries int                    // guarded by ackInbox.mu
	ok      chan *jetstream.PubAck // guarded by ackInbox.mu; made by Ok or Err
	errc    chan error             // guarded by ackInbox.mu; made by Ok or Err
	in      *ackInbox
}

func (f *ackFuture) Ok() <-chan *jetstream.PubAck { f.chans(); return f.ok }
func (f *ackFuture) Err() <-chan error            { f.chans(); return f.errc }
func (f *ackFuture) Msg() *nats.Msg               { return f.msg }

var _ jetstream.PubAckFuture = (*ackFuture)(nil)

// chans makes f's channels, with f's answer in one when it came before.
func (f *ackFuture) chans() {
	f.in.mu.Lock()
	defer f.in.mu.Unlock()
	if f.ok != nil {
		return
	}
	f.ok, f.errc = make(chan *jetstream.PubAck, 1), make(chan error, 1)
	if f.done.Load() {
		f.send()
	}
}

// send puts f's answer into its channels. Caller holds ackInbox.mu, and
// f is answered.
func (f *ackFuture) send() {
	if f.err != nil {
		f.errc <- f.err
		return
	}
	f.ok <- f.ack
}

// answerOf returns fut's answer and true once it came, without waiting.
func answerOf(fut jetstream.PubAckFuture) (ack *jetstream.PubAck, err error, ok bool) {
	if f, is := fut.(*ackFuture); is {
		if !f.done.Load() {
			return nil, nil, false
		}
		return f.ack, f.err, true
	}
	select {
	case ack = <-fut.Ok():
		return ack, nil, true
	case err = <-fut.Err():
		return nil, err, true
	default:
		return nil, nil, false
	}
}

// newAckInbox subscribes to a fresh inbox on nc.
func newAckInbox(nc *nats.Conn) (*ackInbox, error) {
	in := &ackInbox{nc: nc, prefix: nc.NewRespInbox() + ".", wake: make(chan struct{}, 1), timeout: pipelineAckTimeout}
	sub, err := nc.Subscribe(in.prefix+"*", in.handle)
	if err != nil {
		return nil, err
	}
	in.sub = sub
	in.status = nc.StatusChanged(nats.RECONNECTING, nats.CLOSED)
	return in, nil
}

// watch answers every pending record with nats.ErrDisconnected each time
// the connection starts reconnecting, as nats.go does (a close only ends
// the watch, as there); it returns when close removes the status
// listener or the connection closes.
func (in *ackInbox) watch() {
	for s := range in.status {
		if s == nats.CLOSED {
			return
		}
		in.failAll(nats.ErrDisconnected)
	}
}

// close unsubscribes and answers what is pending with err.
func (in *ackInbox) close(err error) {
	_ = in.sub.Unsubscribe()
	in.nc.RemoveStatusListener(in.status)
	in.failPending(err, true)
}

// publish publishes msg (which must have no reply subject) and returns the
// future of its acknowledgement.
func (in *ackInbox) publish(msg *nats.Msg) (*ackFuture, error) {
	return in.publishWith(&ackFuture{}, msg)
}

// publishWith is publish with f, which must be new, as the future.
func (in *ackInbox) publishWith(f *ackFuture, msg *nats.Msg) (*ackFuture, error) {
	f.msg, f.in = msg, in
	in.mu.Lock()
	if in.closed {
		in.mu.Unlock()
		return nil, nats.ErrConnectionClosed
	}
	f.id = in.base + uint64(len(in.q))
	f.deadline = time.Now().Add(in.timeout)
	in.q = append(in.q, f)
	in.waiting++
	if in.timerAt.IsZero() || f.deadline.Before(in.timerAt) {
		// Set for no record or a later deadline (a shorter timeout):
		// set for this one. Otherwise it fires at an earlier record's
		// deadline and is set again for the earliest one left.
		in.timerAt = f.deadline
		if in.timer == nil {
			in.timer = time.AfterFunc(in.timeout, in.expire)
		} else {
			in.timer.Reset(in.timeout)
		}
	}
	in.mu.Unlock()
	var buf [64]byte
	msg.Reply = string(strconv.AppendUint(append(buf[:0], in.prefix...), f.id, 36))
	if err := in.nc.PublishMsg(msg); err != nil {
		in.mu.Lock()
		if in.take(f.id) == f {
			in.drop()
		}
		in.mu.Unlock()
		return nil, err
	}
	return f, nil
}

// take returns the record of id when it waits for its answer, and takes
// it out of q (the caller answers it or drops it). Caller holds mu.
func (in *ackInbox) take(id uint64) *ackFuture {
	if id < in.base || id-in.base >= uint64(len(in.q)) {
		return nil
	}
	i := id - in.base
	f := in.q[i]
	if f == nil {
		return nil
	}
	in.q[i] = nil
	in.waiting--
	return f
}

// drop moves q's start past the records answered. Caller holds mu.
func (in *ackInbox) drop() {
	i := 0
	for i < len(in.q) && in.q[i] == nil {
		i++
	}
	in.q = in.q[i:]
	in.base += uint64(i)
	if len(in.q) == 0 {
		in.q = in.q[:0:0] // lets a burst's array go
	}
}

// answer answers f. Caller holds mu and took f out of q.
func (in *ackInbox) answer(f *ackFuture, ack *jetstream.PubAck, err error) {
	f.ack, f.err = ack, err
	f.done.Store(true)
	if f.ok != nil {
		f.send()
	}
}

// signal tells the ack reader an answer came.
func (in *ackInbox) signal() {
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// expire is the timer's callback: it answers the records past their
// deadline with jetstream.ErrAsyncPublishTimeout and sets the timer for
// the earliest deadline left.
func (in *ackInbox) expire() {
	now := time.Now()
	in.mu.Lock()
	var next time.Time
	n := 0
	for i, f := range in.q {
		switch {
		case f == nil:
		case !now.Before(f.deadline):
			in.q[i] = nil
			in.waiting--
			in.answer(f, nil, jetstream.ErrAsyncPublishTimeout)
			n++
		case next.IsZero() || f.deadline.Before(next):
			next = f.deadline
		}
	}
	in.drop()
	in.timerAt = time.Time{}
	if !next.IsZero() && !in.closed {
		in.timerAt = next
		in.timer.Reset(next.Sub(now))
	}
	in.mu.Unlock()
	if n > 0 {
		in.signal()
	}
}

// idOf returns the id of a reply subject's last token: base 36 as
// publish writes it (no sign, no leading zero, no upper case).
func idOf(s string) (uint64, bool) {
	if s == "" || len(s) > 13 || (s[0] == '0' && len(s) > 1) {
		return 0, false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'z') {
			return 0, false
		}
	}
	id, err := strconv.ParseUint(s, 36, 64)
	if err != nil {
		return 0, false
	}
	return id, true
}

// handle is the subscription's callback.
func (in *ackInbox) handle(m *nats.Msg) {
	tok, ok := strings.CutPrefix(m.Subject, in.prefix)
	if !ok {
		return
	}
	id, ok := idOf(tok)
	if !ok {
		return
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" { // no responders
		in.mu.Lock()
		f := in.at(id)
		if f != nil && f.retries < jetstream.DefaultPubRetryAttempts {
			f.retries++
			in.mu.Unlock()
			time.AfterFunc(jetstream.DefaultPubRetryWait, func() { in.retry(f) })
			return
		}
		in.mu.Unlock()
		in.settle(id, nil, jetstream.ErrNoStreamResponse)
		return
	}
	ack, err := decodePubAckIn(m.Data, in.stream)
	if ack != nil {
		in.stream = ack.Stream // the next answers share the string
	}
	in.settle(id, ack, err)
}

// at returns the record of id when it waits for its answer. Caller holds
// mu.
func (in *ackInbox) at(id uint64) *ackFuture {
	if id < in.base || id-in.base >= uint64(len(in.q)) {
		return nil
	}
	return in.q[id-in.base]
}

// retry publishes f's record again, unless it was answered meanwhile.
func (in *ackInbox) retry(f *ackFuture) {
	in.mu.Lock()
	pending := in.at(f.id) == f
	in.mu.Unlock()
	if !pending {
		return
	}
	if err := in.nc.PublishMsg(f.msg); err != nil {
		in.settle(f.id, nil, err)
	}
}

// settle answers the record of id, unless it was answered before.
func (in *ackInbox) settle(id uint64, ack *jetstream.PubAck, err error) {
	in.mu.Lock()
	f := in.take(id)
	if f == nil {
		in.mu.Unlock()
		return
	}
	in.drop()
	in.answer(f, ack, err)
	in.mu.Unlock()
	in.signal()
}

// failAll answers every pending record with err.
func (in *ackInbox) failAll(err error) { in.failPending(err, false) }

// failPending answers every pending record with err; closing, it also
// refuses later publishes, in the same critical section, so that no
// publish can slip in between the answers and the refusal and be left
// without either.
func (in *ackInbox) failPending(err error, closing bool) {
	in.mu.Lock()
	for _, f := range in.q {
		if f != nil {
			in.answer(f, nil, err)
		}
	}
	clear(in.q)
	in.base += uint64(len(in.q))
	in.q = in.q[:0:0]
	in.waiting = 0
	if closing {
		in.closed = true
		if in.timer != nil {
			in.timer.Stop()
			in.timerAt = time.Time{}
		}
	}
	in.mu.Unlock()
	in.signal()
}

// len returns how many records wait for their acknowledgement.
func (in *ackInbox) len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.waiting
}

// pubAckReply is a publish's answer as nats.go decodes it.
type pubAckReply struct {
	Type  string              `json:"type"`
	Error *jetstream.APIError `json:"error,omitempty"`
	*jetstream.PubAck
}

// decodePubAck decodes a publish's answer as nats.go's asynchronous
// publisher does: the server's error, a PubAck naming its stream, or
// jetstream.ErrInvalidJSAck. The answers a stream gives a stored or
// duplicate record ({"stream":S,"seq":N} and the same with
// "duplicate":true, S a plain string) are read by hand, the rest with
// encoding/json.
func decodePubAck(data []byte) (*jetstream.PubAck, error) {
	return decodePubAckIn(data, "")
}

// decodePubAckIn is decodePubAck, whose PubAck holds the string stream,
// when the answer names that stream, instead of a copy of its own.
func decodePubAckIn(data []byte, stream string) (*jetstream.PubAck, error) {
	if ack, ok := scanPubAck(data, stream); ok {
		return ack, nil
	}
	var r pubAckReply
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if r.PubAck == nil || r.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return r.PubAck, nil
}

// scanPubAck is decodePubAckIn's fast path; ok is false for anything
// outside it.
func scanPubAck(data []byte, known string) (*jetstream.PubAck, bool) {
	const head, mid, dup = `{"stream":"`, `","seq":`, `,"duplicate":true}`
	s := data
	if len(s) < len(head) || string(s[:len(head)]) != head {
		return nil, false
	}
	s = s[len(head):]
	i := 0
	ascii := true
	for ; i < len(s) && s[i] != '"'; i++ {
		switch c := s[i]; {
		case c == '\\', c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
	}
	stream := s[:i]
	if i == 0 || (!ascii && !utf8.Valid(stream)) {
		return nil, false
	}
	s = s[i:]
	if len(s) < len(mid) || string(s[:len(mid)]) != mid {
		return nil, false
	}
	s = s[len(mid):]
	i = 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || (i > 1 && s[0] == '0') {
		return nil, false
	}
	seq, err := strconv.ParseUint(string(s[:i]), 10, 64)
	if err != nil {
		return nil, false
	}
	ack := &jetstream.PubAck{Stream: known, Sequence: seq}
	if string(stream) != known {
		ack.Stream = string(stream)
	}
	switch rest := string(s[i:]); rest {
	case "}":
	case dup:
		ack.Duplicate = true
	default:
		return nil, false
	}
	return ack, true
}
