package router

// Pipelined publish. A WebSocket session's publishes do not wait for each
// other: the reader checks a publish (rate limit, fields, grants and the
// publish hook, in request order, as before), reserves a slot in the
// session's pipeline and hands the append to the engine
// (engine.AsyncAppender), then reads the next frame while the append is in
// flight. Replies keep request order: every reply of the session goes
// through the pipeline's FIFO, and a slot's reply ("published" or
// "error") is sent only once every earlier slot's has been, so a fast
// append never overtakes a slow one. Records keep publish order: the
// engine stores the records of successive AppendAsync calls on one
// partition in call order, and a session's publishes are handed over one
// at a time from its reader, so records with the same topic and key
// (which share a partition) are stored in the order they were published.
//
// Bounds. At most Options.PublishPipeline publishes are in flight per
// session, holding at most Options.PublishPipelineBytes of data (a single
// publish larger than that is admitted when nothing else is in flight).
// Past either bound the reader stops reading until a reply frees room:
// backpressure through TCP, never an error. Each stop is counted in
// switchyard_publish_pipeline_waits_total by the bound that caused it;
// switchyard_publishes_in_flight is the publishes in flight over all
// sessions.
//
// Other ops (subscribe, ack, refresh, ...) wait until the pipeline is
// empty before they run, so their effects and replies follow every
// earlier publish's, as when publishes ran inline: a subscribe after a
// publish on the same session sees the record.
//
// Shutdown. Once the Router is closing, new publishes are refused
// (shutting_down); Shutdown waits (within ShutdownGrace) for the
// publishes in flight to be answered before closing the sessions, so their
// replies are flushed. A session that ends first (the peer left) has its
// appends finished or canceled by the engine before teardown returns;
// their replies have nowhere to go. A publish is acknowledged only once
// the engine stored it, so nothing acknowledged is lost either way.
//
// # Concurrency
//
// A session's pipeline is made by its first publish (WebSocket or MQTT),
// on the reader goroutine, and published to other goroutines (Shutdown's
// awaitPublishes) under conn.mu.
// The reader goroutine reserves slots and waits for room; the engine's
// goroutines (or the reader itself, for an engine that completes at once)
// complete them, perhaps with engine locks held. pubPipe.mu guards the
// FIFO and is held while replies are handed to session.Send, which never
// blocks, so the session's queue sees them in order: the session's own
// locks are taken under it, inside Send (the queue's, and the close
// state's when a reply overflows the control queue), and nothing else
// (see the lock order in router.go).

import (
	"context"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// Defaults of Options.PublishPipeline and PublishPipelineBytes.
const (
	// DefaultPublishPipeline is enough appends in flight to cover a
	// JetStream round trip at tens of thousands of publishes per second on
	// one session, while the replies it may owe stay far below a session's
	// control-queue bound.
	DefaultPublishPipeline = 64
	// DefaultPublishPipelineBytes is one maximal publish (the default
	// MaxMessageBytes): a session's appends in flight hold at most about
	// this much data besides the one being read.
	DefaultPublishPipelineBytes = 1 << 20
)

// pubPipe is one session's publishes in flight and the replies owed, in
// request order.
type pubPipe struct {
	maxCount, maxBytes int
	// maxOwed bounds the bytes of the finished replies waiting in q behind
	// an append (the session's control-queue bound): a client that keeps
	// an append in flight and sends requests answered at once (MQTT
	// PUBRELs, refused publishes) is closed past it, as the control queue
	// closes a client that does not read its replies.
	maxOwed int

	mu      sync.Mutex // guards following
	q       []*pubSlot // replies owed, oldest first
	pending int        // slots of q not completed yet
	bytes   int        // data bytes of those slots
	owed    int        // bytes of the finished replies in q
	room    chan struct{}
}

// pubSlot is one reply owed: complete once frame is set.
type pubSlot struct {
	size     int
	frame    []byte
	complete bool
}

// newPipe returns a pipeline with the Router's bounds.
func (cn *conn) newPipe() *pubPipe {
	o := &cn.rt.opts
	return newPubPipe(o.PublishPipeline, o.PublishPipelineBytes, o.Session.ControlBytes)
}

// ownPipe returns cn's pipeline, made by the session's first publish (see
// conn.pipe); on the reader goroutine.
func (cn *conn) ownPipe() *pubPipe {
	if cn.pipe == nil {
		p := cn.newPipe()
		cn.mu.Lock()
		cn.pipe = p
		cn.mu.Unlock()
	}
	return cn.pipe
}

// publishPipe returns cn's pipeline, nil while it has none, on any
// goroutine (the reader reads cn.pipe itself).
func (cn *conn) publishPipe() *pubPipe {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	return cn.pipe
}

func newPubPipe(maxCount, maxBytes, maxOwed int) *pubPipe {
	if maxOwed <= 0 {
		maxOwed = session.DefaultControlBytes
	}
	return &pubPipe{maxCount: maxCount, maxBytes: maxBytes, maxOwed: maxOwed, room: make(chan struct{})}
}

// wakeLocked wakes every waiter; caller holds p.mu.
func (p *pubPipe) wakeLocked() {
	close(p.room)
	p.room = make(chan struct{})
}

// fits reports whether a publish of size bytes may start now; caller holds
// p.mu. It names the bound that holds it back otherwise.
func (p *pubPipe) fits(size int) (bool, string) {
	switch {
	case p.pending >= p.maxCount:
		return false, "count"
	case p.pending > 0 && p.bytes+size > p.maxBytes:
		return false, "bytes"
	}
	return true, ""
}

// reserve waits until a publish of size bytes fits, then queues its slot.
// It returns nil when the session closes first (the publish is dropped
// unanswered, with the session). waits counts each wait by bound.
func (p *pubPipe) reserve(sess *session.Session, size int, waited func(bound string)) *pubSlot {
	p.mu.Lock()
	for {
		ok, bound := p.fits(size)
		if ok {
			break
		}
		room := p.room
		p.mu.Unlock()
		waited(bound)
		sess.Deferral().Flush() // before the wait (deferral.go)
		select {
		case <-room:
		case <-sess.Closing():
			return nil
		}
		p.mu.Lock()
	}
	s := &pubSlot{size: size}
	p.q = append(p.q, s)
	p.pending++
	p.bytes += size
	p.mu.Unlock()
	return s
}

// complete sets s's reply and sends every reply now due.
func (p *pubPipe) complete(sess *session.Session, s *pubSlot, frame []byte) {
	p.mu.Lock()
	s.frame, s.complete = frame, true
	p.owed += len(frame)
	p.pending--
	p.bytes -= s.size
	p.flushLocked(sess)
	p.wakeLocked()
	p.mu.Unlock()
}

// reply sends frame after every reply owed before it: at once when none is.
func (p *pubPipe) reply(sess *session.Session, frame []byte) {
	p.mu.Lock()
	over := false
	switch {
	case len(p.q) == 0:
		sess.Send(session.Item{Frame: frame})
	case p.owed+len(frame) > p.maxOwed:
		over = true
	default:
		p.q = append(p.q, &pubSlot{frame: frame, complete: true})
		p.owed += len(frame)
	}
	p.mu.Unlock()
	if over {
		// As the control queue closes a client that does not read its
		// replies (session.Options.ControlBytes); after p.mu is let go.
		sess.Close(websocket.StatusPolicyViolation, "too many replies owed")
	}
}

// flushLocked sends the completed replies at the head of the FIFO; caller
// holds p.mu.
func (p *pubPipe) flushLocked(sess *session.Session) {
	n := 0
	for n < len(p.q) && p.q[n].complete {
		p.owed -= len(p.q[n].frame)
		sess.Send(session.Item{Frame: p.q[n].frame})
		p.q[n] = nil
		n++
	}
	if n > 0 {
		p.q = p.q[n:]
		if len(p.q) == 0 {
			p.q = nil
		}
	}
}

// idle waits until every reply owed has been sent, or done is closed; it
// reports whether the pipeline is idle.
func (p *pubPipe) idle(done <-chan struct{}) bool {
	p.mu.Lock()
	for len(p.q) > 0 {
		room := p.room
		p.mu.Unlock()
		select {
		case <-room:
		case <-done:
			return false
		}
		p.mu.Lock()
	}
	p.mu.Unlock()
	return true
}

// inFlight returns the publishes in flight.
func (p *pubPipe) inFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pending
}

// publishAsync hands a checked publish to the engine and answers it
// through the session's pipeline.
func (cn *conn) publishAsync(req *request, msg engine.Message) {
	rt := cn.rt
	pipe := cn.ownPipe()
	slot := pipe.reserve(cn.sess, len(msg.Data), func(bound string) {
		rt.m.pipelineWaits.WithLabelValues(bound).Inc()
	})
	if slot == nil {
		return // the session is closing
	}
	rt.m.publishesInFlight.Inc()
	id := req.ID
	topic := msg.Topic
	rt.appendAsync(cn.publishCtx(), msg, "ws", func(a engine.Appended, err error) {
		rt.m.publishesInFlight.Dec()
		var frame []byte
		if err != nil {
			frame = cn.errorFrame(id, toProto(err))
		} else {
			frame = encodePublished(id, topic, a)
		}
		pipe.complete(cn.sess, slot, frame)
	})
}

// appendAsync is append for a pipelined publish: the same checks and
// metrics, with the engine's AppendAsync when it has one (Append
// otherwise). done is called exactly once.
func (rt *Router) appendAsync(ctx context.Context, msg engine.Message, transport string, done func(engine.Appended, error)) {
	if err := rt.preAppend(ctx, msg.Topic, transport); err != nil {
		done(engine.Appended{}, err)
		return
	}
	start := time.Now()
	finish := func(a engine.Appended, err error) {
		rt.postAppend(msg.Topic, transport, start, a, err)
		done(a, err)
	}
	if aa, ok := rt.eng.(engine.AsyncAppender); ok {
		aa.AppendAsync(ctx, msg, finish)
		return
	}
	finish(rt.eng.Append(ctx, msg))
}

// awaitPublishes waits, within ctx, until every session's publishes in
// flight have been answered.
func awaitPublishes(ctx context.Context, conns []*conn) {
	for _, c := range conns {
		if p := c.publishPipe(); p != nil && !p.idle(ctx.Done()) {
			return
		}
	}
}
