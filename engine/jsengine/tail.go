package jsengine

// Live tail. Each engine runs one ordered consumer over <prefix>.rec.>,
// starting after the last record stored when it was created. It sees
// every record stored by any node, in stream order (so in offset order per
// partition), only once stored (a core subscription would also see
// publishes that the expected-sequence check then rejects), and resumes
// after the last record it announced after a reconnect, so observers and
// groups see every record stored meanwhile by other nodes, in order. It
// feeds observers and the node's groups (cursor.go); no goroutine per
// subscriber, no polling.
//
// A node whose tail meets a record of an incarnation newer than the one
// it knows (its topic watcher has not yet reached the delete and the
// create made on another node) asks the bucket for the topic at once,
// announces the old incarnation's delete to its observers, then the
// record: records of a re-created topic are never dropped by a lagging
// watcher. While the bucket cannot be reached the tail waits and retries
// rather than drop it (tailTopic).
//
// The live tail's hand-off. nats.go's consumer calls tailHandoff for each
// message of the tail, which hands it to the tail goroutine (tailLoop)
// through tailQ; the tail goroutine handles the messages one at a time, in
// the order they came (tailMsg), and announces the records as runs of an
// engine.Batch: a run ends when tailQ is empty (nothing more is at hand),
// after maxTailRun records (so that the first record of a long burst is
// not held for the whole burst), before tailMsg waits for the topic bucket,
// and when the tail stops. The gateway wakes each subscriber's writer once
// per run instead of once per record.
//
// The consumer's callback gives no sign of more messages waiting behind
// the one it hands over; the queue between it and the tail goroutine is
// what shows them: while the tail goroutine works on a record, the
// consumer hands over the messages it has already read.

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// tailState is the live tail's progress, which appends wait on
// (waitTail), and the tail goroutine's hand-off.
type tailState struct {
	tailMu   sync.Mutex // guards following
	tailSeq  uint64     // last stream sequence the tail has announced
	tailWake chan struct{}
	tailWait int
	// tailGaveUp is the highest sequence a waitTail gave up on because the
	// tail did not reach it within tailWaitMax (set by New; tests shorten
	// it); tailGiveUps counts those give-ups.
	tailGaveUp  uint64
	tailWaitMax time.Duration
	tailGiveUps atomic.Int64
	tailCC      jetstream.ConsumeContext // guarded by tailCCMu (tail_keeper.go)
	tailKeeper

	// The tail goroutine's hand-off and announcement runs.
	tailQ     chan jetstream.Msg // from the consumer's callback to tailLoop
	tailStop  chan struct{}      // closed by shutdown once the consumer has stopped
	tailBatch engine.Batch       // used by the tail goroutine only
	tailCtx   context.Context    // carries tailBatch; what the tail announces with
}

const (
	// tailQueueLen is how many messages the consumer may hand over ahead
	// of the tail goroutine: enough for several of the consumer's pulls at
	// the rates a gateway fans out. A full queue holds the consumer back,
	// as a slow tail did when the consumer's callback did all its work.
	tailQueueLen = 256
	// maxTailRun bounds a run of announcements, so that under a steady
	// burst the records of a run wait at most for the fan-out of 63 others
	// before the subscribers' writers are woken.
	maxTailRun = 64
	// defaultTailWaitMax bounds how long an append waits for the tail to
	// announce its record (see waitTail): far longer than the tail takes
	// when it keeps up.
	defaultTailWaitMax = 5 * time.Second
)

// tailHandoff is the consumer's callback: it hands msg to the tail
// goroutine, waiting while tailQ is full, unless the engine closes.
func (e *Engine) tailHandoff(msg jetstream.Msg) {
	select {
	case e.tailQ <- msg:
	case <-e.closeCh:
	}
}

// tailLoop is the tail goroutine: it handles what the consumer hands over
// until shutdown closes tailStop, once the consumer has stopped, and tailQ
// is empty. It ends every run before it waits for the next message, so
// that no run is left open when it exits.
func (e *Engine) tailLoop() {
	defer e.wg.Done()
	run := 0 // records announced or skipped since the run's last End
	for {
		var msg jetstream.Msg
		select {
		case msg = <-e.tailQ:
		default:
			if run > 0 {
				e.tailBatch.End()
				run = 0
			}
			select {
			case msg = <-e.tailQ:
			case <-e.tailStop:
				return
			}
		}
		e.tailHandling.Store(true)
		e.tailMsg(msg)
		e.tailHandling.Store(false)
		if run++; run >= maxTailRun {
			e.tailBatch.End()
			run = 0
		}
	}
}

// tailMsg handles one stored message from the live tail (the engine's
// ordered consumer over every record subject): it updates the partition's
// view and cache, calls observers and feeds the partition's groups. It
// runs on the tail goroutine (tail.go), and announces in tailBatch's run.
func (e *Engine) tailMsg(msg jetstream.Msg) {
	seq, ok := streamSeqOf(msg.Reply()) // msg.Metadata()'s, without its allocations: tailseq.go
	if !ok {
		return
	}
	defer e.advanceTail(seq)
	e.tailMu.Lock()
	stale := seq <= e.tailSeq
	e.tailMu.Unlock()
	if stale {
		return
	}
	// <prefix>.rec.<topic tokens>.<inc>.<partition>
	subj := strings.TrimPrefix(msg.Subject(), e.prefix+".rec.")
	i := strings.LastIndexByte(subj, '.')
	if i < 0 {
		return
	}
	part, err := strconv.Atoi(subj[i+1:])
	if err != nil {
		return
	}
	subj = subj[:i]
	i = strings.LastIndexByte(subj, '.')
	if i < 0 {
		return
	}
	inc, err := strconv.ParseUint(subj[i+1:], 10, 64)
	if err != nil {
		return
	}
	name := subj[:i]
	t := e.local(name)
	if t == nil || t.inc < inc {
		e.tailBatch.End() // what is announced is not held for the bucket
		t = e.tailTopic(name, inc)
	}
	if t == nil || t.inc != inc || part >= len(t.parts) || t.deleted.Load() {
		return
	}
	p := t.parts[part]
	pm, err := parseMsg(t, part, seq, msg.Headers(), msg.Data())
	if err != nil {
		return
	}
	p.smu.Lock()
	p.next = max(p.next, pm.off+1)
	p.seen = max(p.seen, seq)
	p.tailed = max(p.tailed, pm.off+1)
	if pm.mark {
		p.earliest = max(p.earliest, pm.off+1)
		p.cache = p.cache[:0]
		p.smu.Unlock()
		return
	}
	p.cacheAdd(cached{rec: pm.rec, seq: seq})
	p.smu.Unlock()

	for _, o := range e.observers.List() {
		engine.Announce(e.tailCtx, o, pm.rec)
	}
	if p.npumped.Load() == 0 {
		// No cursor here would act on the record: a Join that makes one
		// pumps it itself, after the record is in the cache above.
		return
	}
	e.gmu.Lock()
	for _, gp := range p.pumped { // copied on write: pump may change it
		e.pumpAppended(gp)
	}
	e.gmu.Unlock()
}

// tailTopic returns the incarnation of name the bucket holds for a tail
// record of incarnation inc that this node does not know yet. It retries
// while the bucket cannot be reached, holding the tail back rather than
// dropping the record, until the engine closes.
func (e *Engine) tailTopic(name string, inc uint64) *topic {
	for delay := 20 * time.Millisecond; ; delay = min(2*delay, time.Second) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		t, err := e.refresh(ctx, name)
		cancel()
		if err == nil || errors.Is(err, engine.ErrUnknownTopic) {
			return t
		}
		e.log.Warn("jsengine: tail: topic of a new incarnation", "topic", name, "inc", inc, "err", err)
		select {
		case <-time.After(delay):
		case <-e.closeCh:
			return nil
		}
	}
}

func (e *Engine) advanceTail(seq uint64) {
	e.tailMu.Lock()
	if seq > e.tailSeq {
		e.tailSeq = seq
	}
	if e.tailWait > 0 {
		close(e.tailWake)
		e.tailWake = make(chan struct{})
	}
	e.tailMu.Unlock()
}
