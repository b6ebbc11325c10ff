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
//     publish order as before.
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
// partition.amu and Engine.wmu; the subscription's callback and the
// timers take it alone, and call nothing under it).
//
// Concurrency: ackInbox is safe for concurrent use; its status goroutine
// (watch, started by setup) exits when shutdown closes the inbox or the
// connection closes.

import (
	"encoding/json"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ackInbox routes the acknowledgements of chained records to their
// futures.
type ackInbox struct {
	nc     *nats.Conn
	prefix string // reply subjects are prefix + id
	sub    *nats.Subscription
	status chan nats.Status
	// timeout bounds the wait for an acknowledgement: pipelineAckTimeout
	// (tests shorten it).
	timeout time.Duration

	mu      sync.Mutex // guards following
	n       uint64
	pending map[string]*ackFuture // nil once closed
}

// ackFuture is one chained record's acknowledgement; it implements
// jetstream.PubAckFuture. Exactly one of ok and err receives a value.
type ackFuture struct {
	msg     *nats.Msg
	ok      chan *jetstream.PubAck
	err     chan error
	retries int         // guarded by ackInbox.mu
	timer   *time.Timer // guarded by ackInbox.mu
}

func (f *ackFuture) Ok() <-chan *jetstream.PubAck { return f.ok }
func (f *ackFuture) Err() <-chan error            { return f.err }
func (f *ackFuture) Msg() *nats.Msg               { return f.msg }

var _ jetstream.PubAckFuture = (*ackFuture)(nil)

// newAckInbox subscribes to a fresh inbox on nc.
func newAckInbox(nc *nats.Conn) (*ackInbox, error) {
	in := &ackInbox{nc: nc, prefix: nc.NewRespInbox() + ".", pending: map[string]*ackFuture{}, timeout: pipelineAckTimeout}
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
	f := &ackFuture{msg: msg, ok: make(chan *jetstream.PubAck, 1), err: make(chan error, 1)}
	in.mu.Lock()
	if in.pending == nil {
		in.mu.Unlock()
		return nil, nats.ErrConnectionClosed
	}
	in.n++
	id := strconv.FormatUint(in.n, 36)
	in.pending[id] = f
	f.timer = time.AfterFunc(in.timeout, func() { in.settle(id, nil, jetstream.ErrAsyncPublishTimeout) })
	in.mu.Unlock()
	msg.Reply = in.prefix + id
	if err := in.nc.PublishMsg(msg); err != nil {
		in.mu.Lock()
		if in.pending[id] == f {
			delete(in.pending, id)
			f.timer.Stop()
		}
		in.mu.Unlock()
		return nil, err
	}
	return f, nil
}

// handle is the subscription's callback.
func (in *ackInbox) handle(m *nats.Msg) {
	id, ok := strings.CutPrefix(m.Subject, in.prefix)
	if !ok {
		return
	}
	if len(m.Data) == 0 && m.Header.Get("Status") == "503" { // no responders
		in.mu.Lock()
		f := in.pending[id]
		if f != nil && f.retries < jetstream.DefaultPubRetryAttempts {
			f.retries++
			in.mu.Unlock()
			time.AfterFunc(jetstream.DefaultPubRetryWait, func() { in.retry(id, f) })
			return
		}
		in.mu.Unlock()
		in.settle(id, nil, jetstream.ErrNoStreamResponse)
		return
	}
	ack, err := decodePubAck(m.Data)
	in.settle(id, ack, err)
}

// retry publishes f's record again, unless it was answered meanwhile.
func (in *ackInbox) retry(id string, f *ackFuture) {
	in.mu.Lock()
	pending := in.pending[id] == f
	in.mu.Unlock()
	if !pending {
		return
	}
	if err := in.nc.PublishMsg(f.msg); err != nil {
		in.settle(id, nil, err)
	}
}

// settle answers the record of id, unless it was answered before.
func (in *ackInbox) settle(id string, ack *jetstream.PubAck, err error) {
	in.mu.Lock()
	f := in.pending[id]
	if f == nil {
		in.mu.Unlock()
		return
	}
	delete(in.pending, id)
	f.timer.Stop()
	in.mu.Unlock()
	if err != nil {
		f.err <- err
		return
	}
	f.ok <- ack
}

// failAll answers every pending record with err.
func (in *ackInbox) failAll(err error) { in.failPending(err, false) }

// failPending answers every pending record with err; closing, it also
// refuses later publishes, in the same critical section, so that no
// publish can slip in between the answers and the refusal and be left
// without either.
func (in *ackInbox) failPending(err error, closing bool) {
	in.mu.Lock()
	fs := make([]*ackFuture, 0, len(in.pending))
	for id, f := range in.pending {
		delete(in.pending, id)
		f.timer.Stop()
		fs = append(fs, f)
	}
	if closing {
		in.pending = nil
	}
	in.mu.Unlock()
	for _, f := range fs {
		f.err <- err
	}
}

// len returns how many records wait for their acknowledgement.
func (in *ackInbox) len() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return len(in.pending)
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
	if ack, ok := scanPubAck(data); ok {
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

// scanPubAck is decodePubAck's fast path; ok is false for anything
// outside it.
func scanPubAck(data []byte) (*jetstream.PubAck, bool) {
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
	ack := &jetstream.PubAck{Stream: string(stream), Sequence: seq}
	switch rest := string(s[i:]); rest {
	case "}":
	case dup:
		ack.Duplicate = true
	default:
		return nil, false
	}
	return ack, true
}
