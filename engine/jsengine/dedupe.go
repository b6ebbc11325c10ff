package jsengine

// Idempotent publish: a MsgID is claimed in the dedupe bucket; the claim
// fixes the Nats-Msg-Id every publish of that MsgID carries for as long as
// the claim lives, so the record stream's own duplicate detection stores
// it at most once, however often and from whichever node it is retried.
//
// A MsgID is claimed in the <prefix>_dedupe bucket (bucket TTL: the dedupe
// window) with an atomic create holding the claim time on the engine's
// clock. The claim's revision names it: every publish of that MsgID while
// the claim lives carries Nats-Msg-Id <claim key>.<revision>, and the
// record stream's Duplicates window is the policy's DedupeWindow, so the
// server stores it at most once. When an append is confirmed the claim
// records its position, which repeats within the window return with
// Duplicate set. An append whose outcome is unknown (its context ended, or
// the connection dropped, with the publish in flight) leaves the claim
// unconfirmed, never deleted: a retry on any node publishes again at once
// under the same Nats-Msg-Id, and either stores the record (the first try
// never landed) or gets the server's duplicate acknowledgement, with the
// first record's stream sequence, and reports that record's position with
// Duplicate set. A retry whose publish is refused because the partition
// moved on (a standalone server checks the expected last sequence before
// duplicates; a cluster's leader can refuse it before the first publish is
// proposed) and then finds the record under its Nats-Msg-Id as the
// partition's last reports it with Duplicate set too: only the append
// whose own publish stored a record reports it as stored, so of the
// repeats of a MsgID at most one does. Nothing waits on an unconfirmed
// claim. Concurrent repeats on one node wait for the first in-process.
//
// On replicated buckets and streams a repeat on another node can find the
// first one's claim, or its publish, proposed and not yet applied (refused
// as existing, yet not found); it then waits for it with growing pauses,
// within its context and at most 10 s, and reports the first record's
// position. The stream's dedupe alone could not serve: it runs on the
// server's clock, while a claim expires with the window on the engine's
// (possibly fake) clock and then gets a new revision, so a MsgID reused
// after the window is stored again. An expired claim that was never
// confirmed is republished under first: its record may have been stored
// late (the stream's window starts then), and only a record older than
// the window makes way for a new claim.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// dedupeCalls is this node's appends with a MsgID in progress, by claim
// key.
type dedupeCalls struct {
	dmu   sync.Mutex // guards following
	dedup map[string]*dedupCall
}

// dedupCall is an in-progress idempotent append on this node; repeats of
// the same MsgID wait for it instead of asking NATS.
type dedupCall struct {
	done chan struct{}
	res  engine.Appended
	err  error
}

// dedupVal is a MsgID's claim in the dedupe bucket. Done is false until an
// append of it is confirmed; the position is then the stored record's.
type dedupVal struct {
	At        time.Time `json:"at"`
	Done      bool      `json:"done"`
	Partition int       `json:"p"`
	Offset    int64     `json:"o"`
	Time      time.Time `json:"t"`
}

// appendOnce appends m unless its MsgID was appended to t within the dedupe
// window. Repeats on this node while the first is in progress wait for it.
func (e *Engine) appendOnce(ctx context.Context, t *topic, m *engine.Message) (engine.Appended, error) {
	key := fmt.Sprintf("%d.%s.%s", t.inc, enc(t.name), enc(m.MsgID))
	e.dmu.Lock()
	if c := e.dedup[key]; c != nil {
		e.dmu.Unlock()
		engine.BeforeWait(ctx)
		select {
		case <-c.done:
		case <-ctx.Done():
			return engine.Appended{}, ctx.Err()
		}
		if c.err == nil {
			a := c.res
			a.Duplicate = true
			return a, nil
		}
	} else {
		c := &dedupCall{done: make(chan struct{})}
		e.dedup[key] = c
		e.dmu.Unlock()
		c.res, c.err = e.appendClaimed(ctx, t, m, key)
		e.dmu.Lock()
		delete(e.dedup, key)
		e.dmu.Unlock()
		close(c.done)
		return c.res, c.err
	}
	return e.appendClaimed(ctx, t, m, key)
}

// appendClaimed appends m under its claim. A claim is created atomically
// with the engine clock's time, so it expires with the dedupe window on
// that clock; its revision at creation names the claim, and every publish
// under it carries Nats-Msg-Id <key>.<revision>. An append whose outcome is
// unknown (its context ended or the connection dropped mid-publish) leaves
// the claim in place, unconfirmed: a retry, here or on another node,
// publishes again under the same Nats-Msg-Id at once, and the server either
// stores it (the first never landed) or answers that it is a duplicate of
// the first, whose position the retry then reports. So an unconfirmed claim
// never makes a retry wait, and a MsgID is never stored twice in the
// window. That holds past the claim's expiry too: a first publish can
// land after its claim expired (it waited for its partition, or its
// acknowledgement was lost), still inside the stream's duplicate window,
// which starts when the server stores it. So an expired claim that was
// never confirmed is republished under first: a record stored now, or
// within the window, is the MsgID's (and confirms the claim from its
// time); only an older one makes way for a new claim.
//
// A claim or a publish being written by another node is another matter.
// On a replicated bucket a create or update of the key is refused while
// another node's write of it is proposed and not yet applied, and a get
// does not show it yet; on a replicated stream a publish is refused (code
// 10158) while another publish with its Nats-Msg-Id is. The append then
// waits, with pauses doubling from claimPauseMin to claimPauseMax, and
// tries again (the claim's position, or its Nats-Msg-Id, is then used as
// above), for as long as ctx allows and at most claimWaitMax.
//
// It is one loop of about 100 lines on purpose: every way round it (claim
// created, found confirmed, found unconfirmed, expired, refused while
// another node writes it) shares the claim and the pause, and reads best
// as one.
func (e *Engine) appendClaimed(ctx context.Context, t *topic, m *engine.Message, key string) (engine.Appended, error) {
	window := e.policy.DedupeWindow
	var pause time.Duration // 0 until the first wait
	var giveUp time.Time
	// wait pauses before the next try while another writer's claim, or
	// its publish, is in process.
	wait := func(what string) error {
		if pause == 0 {
			pause, giveUp = claimPauseMin, time.Now().Add(claimWaitMax)
			engine.BeforeWait(ctx)
		} else {
			pause = min(2*pause, claimPauseMax)
		}
		if time.Now().After(giveUp) {
			return fmt.Errorf("jsengine: msg_id %q: %s still in process after %v: %w", m.MsgID, what, claimWaitMax, engine.ErrUnavailable)
		}
		return e.sleep(ctx, pause)
	}
	for {
		now := e.clock.Now()
		claim, _ := json.Marshal(dedupVal{At: now})
		var rev uint64
		stale := false // an expired claim that was never confirmed
		rctx, cancel := roundTrip(ctx)
		ent, err := e.dedupKV.Get(rctx, key)
		cancel()
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rctx, cancel := roundTrip(ctx)
			rev, err = e.dedupKV.Create(rctx, key, claim)
			cancel()
		case err != nil:
		default:
			var v dedupVal
			_ = json.Unmarshal(ent.Value(), &v)
			switch {
			case now.Sub(v.At) >= window && !v.Done:
				// Expired on the engine's clock, but its publish may have
				// landed late, or be about to (it waited after the
				// claim), inside the stream's duplicate window for its
				// Nats-Msg-Id: publish under it first (see below).
				rev, stale = ent.Revision(), true
			case now.Sub(v.At) >= window: // expired on the engine's clock: a new claim
				rev, err = e.dedupKV.Update(ctx, key, claim, ent.Revision())
			case v.Done:
				return engine.Appended{Partition: v.Partition, Offset: v.Offset, Time: v.Time, Duplicate: true}, nil
			default: // unconfirmed: publish again under the same claim
				rev, now = ent.Revision(), v.At
			}
		}
		if isWrongLast(err) { // another writer's claim of the key is being written
			if err := wait("another claim of it"); err != nil {
				return engine.Appended{}, err
			}
			continue
		}
		if err != nil {
			return engine.Appended{}, unavailable("dedupe", err)
		}
		if f := e.beforeClaimedPublish.Load(); f != nil {
			(*f)()
		}
		a, seq, err := e.appendTo(ctx, t, m, key+"."+strconv.FormatUint(rev, 10))
		if isMsgIDInProcess(err) {
			// Another writer's publish under the claim is being
			// replicated: it is stored soon (and the claim confirmed), or
			// it failed and the next try stores the record.
			if err := wait("another publish of it"); err != nil {
				return engine.Appended{}, err
			}
			continue
		}
		if err != nil {
			return a, err // the claim stays: a retry republishes under it
		}
		if stale {
			if a.Duplicate && now.Sub(a.Time) >= window {
				// The claim's record is older than the window: the MsgID
				// gets a new claim, and a new record under it.
				_, err := e.dedupKV.Update(ctx, key, claim, ent.Revision())
				if isWrongLast(err) {
					if err := wait("another claim of it"); err != nil {
						return engine.Appended{}, err
					}
				} else if err != nil {
					return engine.Appended{}, unavailable("dedupe", err)
				}
				continue
			}
			// The claim's record, stored now or within the window: the
			// window runs from its time.
			now = a.Time
		}
		dl, _ := ctx.Deadline() // appendBound's, or sooner
		e.waitTail(ctx, seq, dl)
		done, _ := json.Marshal(dedupVal{At: now, Done: true, Partition: a.Partition, Offset: a.Offset, Time: a.Time})
		// Confirmed even when the caller gives up now, within the
		// append's bound: unconfirmed, the claim still answers a retry
		// while its record is in the log (see above).
		uctx, cancel := context.WithoutCancel(ctx), context.CancelFunc(noCancel)
		if !dl.IsZero() {
			uctx, cancel = context.WithDeadline(uctx, dl)
		}
		_, err = e.dedupKV.Update(uctx, key, done, rev)
		cancel()
		if err != nil && !isWrongLast(err) {
			e.log.Warn("jsengine: dedupe record", "err", err)
		}
		return a, nil
	}
}

// jsErrMsgIDInProcess is the server's error code for a publish whose
// Nats-Msg-Id another publish, not yet applied by a replicated stream,
// carries.
const jsErrMsgIDInProcess jetstream.ErrorCode = 10158

func isMsgIDInProcess(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrMsgIDInProcess
}

// Bounds of the wait for another node's claim being written (see
// appendClaimed). A replicated write is applied within milliseconds on a
// healthy cluster; the pauses keep a retry from hammering the bucket
// meanwhile, and claimWaitMax ends the wait of a publish whose context has
// no deadline (a leader election can take several seconds).
const (
	claimPauseMin = time.Millisecond
	claimPauseMax = 100 * time.Millisecond
	claimWaitMax  = 10 * time.Second
)

// sleep waits d, or until ctx is done (its error) or the engine closes.
func (e *Engine) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-e.closeCh:
		return closedErr()
	}
}

// storedAt returns the position of the record stored at stream sequence
// seq (a duplicate publish's original), for topic t.
func (e *Engine) storedAt(ctx context.Context, t *topic, seq uint64) (engine.Appended, error) {
	ctx, cancel := roundTrip(ctx)
	m, err := e.rec.GetMsg(ctx, seq)
	cancel()
	if err != nil {
		return engine.Appended{}, unavailable("duplicate", err)
	}
	i := strings.LastIndexByte(m.Subject, '.')
	part, err := strconv.Atoi(m.Subject[i+1:])
	if err != nil || part < 0 || part >= len(t.parts) {
		return engine.Appended{}, fmt.Errorf("jsengine: duplicate at sequence %d: subject %q is not of topic %q", seq, m.Subject, t.name)
	}
	pm, err := parseMsg(t, part, seq, m.Header, m.Data)
	if err != nil {
		return engine.Appended{}, err
	}
	return engine.Appended{Partition: part, Offset: pm.off, Time: pm.time, Duplicate: true}, nil
}
