package router

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/trie"
)

// DeliveryMode says how an in-process subscriber receives records.
type DeliveryMode int

const (
	// Sync calls the handler inline, on the goroutine that appended the
	// record, before the append returns. The handler must be quick; its
	// errors and panics are counted and isolated from every other
	// subscriber.
	Sync DeliveryMode = iota
	// Async queues records in a bounded queue drained by one worker
	// goroutine per subscriber, with the same drop policies as WebSocket
	// sessions; every dropped record is a queue_full dead letter.
	Async
)

// LocalOptions configure an in-process subscription. The zero value is a
// synchronous subscriber without a filter.
type LocalOptions struct {
	Mode DeliveryMode
	// Queue bounds an Async subscriber's queue; default 1024.
	Queue int
	// DropNew makes a full Async queue drop the incoming record instead of
	// the oldest queued one (the default, as "drop_old").
	DropNew bool
	// Filter delivers only records whose headers hold every pair.
	Filter map[string]string
	// Name identifies the subscriber in dead letters; default "local".
	Name string
}

// LocalStats are an in-process subscriber's counters.
type LocalStats struct {
	Delivered uint64 // handler calls that returned nil
	Failed    uint64 // handler calls that returned an error or panicked
	Dropped   uint64 // records an Async queue dropped
}

// LocalSubscription is an in-process subscriber created by Subscribe. Its
// methods are safe for concurrent use.
type LocalSubscription struct {
	rt      *Router
	sub     *subscription
	pattern string
	opts    LocalOptions
	handle  func(*engine.Record) error

	delivered, failed, dropped atomic.Uint64

	// Async only.
	mu     sync.Mutex // guards queue and closed
	queue  []*engine.Record
	closed bool
	wake   chan struct{} // capacity 1
	done   chan struct{} // closed when the worker exits
	once   sync.Once
}

// Publish appends a message to the log as a client publish would, with the
// same validation (topic syntax, reserved $ topics, size limit), and fans it
// out to every subscriber, in-process ones included. It needs no socket.
func (rt *Router) Publish(ctx context.Context, m engine.Message) (engine.Appended, error) {
	if err := trie.ValidateTopic(m.Topic); err != nil {
		return engine.Appended{}, err
	}
	if trie.IsSystem(m.Topic) {
		return engine.Appended{}, perr(codeForbidden, "topics starting with $ are reserved for the server")
	}
	if max := rt.settings().maxMessageBytes; len(m.Data) > max {
		return engine.Appended{}, perr(codeTooLarge, "data is %d bytes; the limit is %d", len(m.Data), max)
	}
	return rt.append(ctx, m, "local")
}

// Subscribe registers an in-process subscriber to records appended from now
// on whose topic matches pattern. Records are handed over as shared,
// read-only values. The subscription ends with Unsubscribe or Shutdown.
// An Async subscriber starts one worker goroutine, which Unsubscribe (or
// Shutdown) stops and waits for.
func (rt *Router) Subscribe(pattern string, opts LocalOptions, handler func(*engine.Record) error) (*LocalSubscription, error) {
	if err := trie.ValidatePattern(pattern); err != nil {
		return nil, err
	}
	if handler == nil {
		return nil, fmt.Errorf("router: Subscribe needs a handler")
	}
	if opts.Queue <= 0 {
		opts.Queue = 1024
	}
	if opts.Name == "" {
		opts.Name = "local"
	}
	ls := &LocalSubscription{rt: rt, pattern: pattern, opts: opts, handle: handler}
	ls.sub = &subscription{pattern: pattern, filter: maps.Clone(opts.Filter), local: ls}
	ls.sub.isLive.Store(true)
	rt.mu.Lock()
	if rt.closing.Load() {
		rt.mu.Unlock()
		return nil, perr(codeShuttingDown, "server is shutting down")
	}
	rt.local[ls] = struct{}{}
	rt.mu.Unlock()
	if opts.Mode == Async {
		ls.wake = make(chan struct{}, 1)
		ls.done = make(chan struct{})
		ls.queue = make([]*engine.Record, 0, min(opts.Queue, 64))
		rt.wg.Add(1)
		go func() {
			defer rt.wg.Done()
			defer close(ls.done)
			ls.work()
		}()
	}
	if err := rt.subs.Add(pattern, ls.sub); err != nil {
		ls.Unsubscribe()
		return nil, err
	}
	rt.m.subscriptions.WithLabelValues("local").Inc()
	return ls, nil
}

// Stats returns the subscriber's counters.
func (ls *LocalSubscription) Stats() LocalStats {
	return LocalStats{Delivered: ls.delivered.Load(), Failed: ls.failed.Load(), Dropped: ls.dropped.Load()}
}

// Unsubscribe stops deliveries. For an Async subscriber it lets the worker
// finish the record it is handling, drops what is still queued (without
// dead letters: the subscriber asked to stop) and waits for the worker.
func (ls *LocalSubscription) Unsubscribe() {
	ls.once.Do(func() {
		if ls.rt.subs.Remove(ls.pattern, ls.sub) {
			ls.rt.m.subscriptions.WithLabelValues("local").Dec()
		}
		ls.rt.mu.Lock()
		delete(ls.rt.local, ls)
		ls.rt.mu.Unlock()
		if ls.opts.Mode == Async {
			ls.mu.Lock()
			ls.closed = true
			ls.queue = nil
			ls.mu.Unlock()
			select {
			case ls.wake <- struct{}{}:
			default:
			}
			<-ls.done
		}
	})
}

func (rt *Router) stopLocal() {
	rt.mu.Lock()
	subs := make([]*LocalSubscription, 0, len(rt.local))
	for ls := range rt.local {
		subs = append(subs, ls)
	}
	rt.mu.Unlock()
	for _, ls := range subs {
		ls.Unsubscribe()
	}
}

// deliver takes one record from the fan-out.
func (ls *LocalSubscription) deliver(rec *engine.Record) {
	if ls.opts.Mode == Sync {
		ls.call(rec)
		return
	}
	ls.mu.Lock()
	if ls.closed {
		ls.mu.Unlock()
		return
	}
	var lost *engine.Record
	if len(ls.queue) >= ls.opts.Queue {
		if ls.opts.DropNew {
			lost = rec
		} else {
			lost = ls.queue[0]
			ls.queue = append(ls.queue[:0], ls.queue[1:]...)
		}
	}
	if lost != rec {
		ls.queue = append(ls.queue, rec)
	}
	ls.mu.Unlock()
	if lost != nil {
		ls.dropped.Add(1)
		policy := "drop_old"
		if ls.opts.DropNew {
			policy = "drop_new"
		}
		ls.rt.m.drops.WithLabelValues(policy).Inc()
		ls.rt.deadLetter(engine.DeadLetter{
			Reason:     engine.ReasonQueueFull,
			Subscriber: ls.opts.Name + " " + ls.pattern,
			Record:     *lost,
			Error:      "in-process queue full (" + policy + ")",
			Time:       time.Now(),
		})
	}
	select {
	case ls.wake <- struct{}{}:
	default:
	}
}

// work is an Async subscriber's worker loop.
func (ls *LocalSubscription) work() {
	var batch []*engine.Record
	for {
		ls.mu.Lock()
		if ls.closed {
			ls.mu.Unlock()
			return
		}
		batch = append(batch[:0], ls.queue...)
		clear(ls.queue)
		ls.queue = ls.queue[:0]
		ls.mu.Unlock()
		for i, rec := range batch {
			ls.call(rec)
			batch[i] = nil
		}
		if len(batch) == 0 {
			<-ls.wake
		}
	}
}

// call runs the handler with errors and panics contained.
func (ls *LocalSubscription) call(rec *engine.Record) {
	defer func() {
		if r := recover(); r != nil {
			ls.failed.Add(1)
			ls.rt.log.Error("in-process subscriber panicked", "pattern", ls.pattern, "panic", r)
		}
	}()
	if err := ls.handle(rec); err != nil {
		ls.failed.Add(1)
		ls.rt.log.Warn("in-process subscriber failed", "pattern", ls.pattern, "topic", rec.Topic, "offset", rec.Offset, "err", err)
		return
	}
	ls.delivered.Add(1)
	ls.rt.m.deliveriesLocal.Inc()
}
