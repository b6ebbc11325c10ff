package jsengine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// Dead letters live in the <prefix>_dl stream, one JSON message each:
// <prefix>.dl.ma.<group in base64url> for a group's max_attempts letters
// (earlier versions wrote them all to <prefix>.dl.ma, still read) and
// <prefix>.dl.qf for queue_full ones, bounded by Policy.DeadLetterLimit.
// At the cap a queue_full letter costs one publish: every node purges the
// subject down to the limit once per qfPurgeEvery of its adds (one round
// trip for the batch, whose reply says exactly how many letters it
// dropped, counted in EvictedDeadLetters), and listings show only the
// newest DeadLetterLimit queue_full letters, so the few stored past the
// cap between purges are never seen.
//
// A group's max_attempts letters are bounded by Policy.MaxGroupDeadLetters:
// after storing one, the node purges the group's subject down to the
// bound (one round trip per letter: letters of a group come after whole
// rounds of attempts, so they are rare). Every letter is bounded by
// Policy.MaxDeadLetters and MaxDeadLetterBytes (bytes as the stream
// stores them): a node reads the stream's totals after a store when they
// may have reached a bound (see dlBounds) and deletes the oldest letters
// past it. Both count what they drop in EvictedDeadLetters. Between two
// checks other nodes' stores may pass the engine-wide bounds by a few
// letters; the next store that checks trims them.

// dlBounds is a node's state for the dead-letter bounds.
type dlBounds struct {
	evicted atomic.Int64 // letters dropped at the per-group and engine-wide bounds

	mu   sync.Mutex // guards following
	skip int64      // stores before the next check of the stream's totals

	// beforeStore, when set (by tests), runs in the letter writer before
	// it publishes a max_attempts letter.
	beforeStore atomic.Pointer[func()]
}

// due reports whether a store should check the stream's totals.
func (b *dlBounds) due() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.skip > 0 {
		b.skip--
		return false
	}
	return true
}

// storedBytes estimates what a letter costs the stream (JetStream's file
// store: subject, headers, data and about 30 bytes of framing).
func storedBytes(m *jetstream.RawStreamMsg) int64 {
	n := len(m.Subject) + len(m.Data) + 30
	for k, vs := range m.Header {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return int64(n)
}

// maxTrimPerStore bounds the letters one store deletes at the engine-wide
// bounds; what is left is trimmed by the next stores.
const maxTrimPerStore = 256

// trimDeadLetters deletes the oldest letters past Policy.MaxDeadLetters
// and MaxDeadLetterBytes, when a check is due, and counts them.
func (e *Engine) trimDeadLetters(ctx context.Context) error {
	p := e.policy
	if p.MaxDeadLetters <= 0 && p.MaxDeadLetterBytes <= 0 || !e.dlb.due() {
		return nil
	}
	info, err := e.dl.Info(ctx)
	if err != nil {
		return unavailable("dead letter totals", err)
	}
	msgs, size := int64(info.State.Msgs), int64(info.State.Bytes)
	over := func() bool {
		return msgs > 1 && (p.MaxDeadLetters > 0 && msgs > int64(p.MaxDeadLetters) || p.MaxDeadLetterBytes > 0 && size > p.MaxDeadLetterBytes)
	}
	seq := info.State.FirstSeq
	for i := 0; i < maxTrimPerStore && over(); i++ {
		m, err := e.dl.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(e.prefix+".dl.>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return unavailable("dead letter trim", err)
		}
		seq = m.Sequence + 1
		switch err := e.dl.DeleteMsg(ctx, m.Sequence); {
		case err == nil:
			e.dlb.evicted.Add(1)
		case !errors.Is(err, jetstream.ErrMsgNotFound): // not found: taken by a redrive or another node
			return unavailable("dead letter trim", err)
		}
		msgs--
		size -= storedBytes(m)
	}
	// The next check comes when a quarter of the room left may be used
	// (other nodes store letters too), at once while over a bound.
	room := int64(math.MaxInt64)
	if p.MaxDeadLetters > 0 {
		room = int64(p.MaxDeadLetters) - msgs
	}
	if p.MaxDeadLetterBytes > 0 && msgs > 0 {
		room = min(room, (p.MaxDeadLetterBytes-size)/max(size/msgs, 1))
	}
	e.dlb.mu.Lock()
	e.dlb.skip = max(room/4, 0)
	e.dlb.mu.Unlock()
	return nil
}

// letterJob is a max_attempts letter waiting for the letter writer, and
// how to tell its group the outcome.
type letterJob struct {
	dl     *engine.DeadLetter
	settle func(error) // called with gmu held
}

// letterWriter stores the max_attempts letters groups queue (see
// Engine.deadLetter), each publish bounded by 5 s, with no lock held
// across it; then it settles each letter's flight under gmu, and only then
// trims the letters to their bounds (trimAfterStore), so a trim's round
// trips never hold a settled record's group back. It exits when the engine
// closes: letters still queued then are not stored, and their records stay
// owed (the next holder dead-letters them again). A publish under way when
// Close begins completes, and its outcome is applied before Close hands
// the partition back (waitLetter): a letter stored is then in the
// release as settled, so the next holder does not store it again.
func (e *Engine) letterWriter() {
	defer e.wg.Done()
	for {
		select {
		case <-e.closeCh:
			return
		case <-e.letterKick:
		}
		e.lmu.Lock()
		jobs := e.letterQ
		e.letterQ = nil
		e.lmu.Unlock()
		for _, j := range jobs {
			if !e.storeJob(j) {
				return
			}
		}
	}
}

// storeJob stores one queued letter and settles its flight; false when the
// engine was closed before it began.
func (e *Engine) storeJob(j letterJob) bool {
	e.lmu.Lock()
	if e.closed.Load() { // read under lmu: Close sees letterBusy or we see closed
		e.lmu.Unlock()
		return false
	}
	busy := make(chan struct{})
	e.letterBusy = busy
	e.lmu.Unlock()
	defer func() {
		e.lmu.Lock()
		e.letterBusy = nil
		e.lmu.Unlock()
		close(busy)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sctx, done := e.onConn(ctx)
	err := done(e.storeDeadLetter(sctx, j.dl))
	if err != nil {
		e.log.Warn("jsengine: dead letter not stored; retrying", "group", j.dl.Group,
			"topic", j.dl.Record.Topic, "offset", j.dl.Record.Offset, "err", err)
	}
	e.gmu.Lock()
	e.lateLetter = true // applied even when Close began meanwhile: it waits for us
	j.settle(err)
	e.lateLetter = false
	e.gmu.Unlock()
	if err == nil && !e.closed.Load() {
		tctx, tdone := e.onConn(ctx)
		e.trimAfterStore(tctx, j.dl)
		tdone(nil)
	}
	return true
}

// closeLetterWait bounds how long Close waits for a letter being stored.
const closeLetterWait = 5 * time.Second

// waitLetter waits, at most closeLetterWait or until ctx ends, for the
// letter writer's publish under way, and for its outcome to be applied to
// its flight. Called by Close after the engine is marked closed, so no
// other publish starts. Past the bound the partition is handed back with
// the record owed, and a letter stored later is stored again by the next
// holder.
func (e *Engine) waitLetter(ctx context.Context) {
	e.lmu.Lock()
	busy := e.letterBusy
	e.lmu.Unlock()
	if busy == nil {
		return
	}
	if f := e.beforeCloseWaitsLetter.Load(); f != nil {
		(*f)()
	}
	t := time.NewTimer(closeLetterWait)
	defer t.Stop()
	select {
	case <-busy:
	case <-t.C:
		e.log.Warn("jsengine: close: a dead letter still being stored; its record stays owed")
	case <-ctx.Done():
	}
}

func (e *Engine) dlSubject(dl *engine.DeadLetter) string {
	switch {
	case dl.Reason == engine.ReasonQueueFull:
		return e.prefix + ".dl.qf"
	case dl.Group != "":
		return e.prefix + ".dl.ma." + base64.RawURLEncoding.EncodeToString([]byte(dl.Group))
	}
	return e.prefix + ".dl.ma"
}

// qfPurgeEvery is how many queue_full letters a node adds between purges
// of the subject down to limit: a sixteenth of the cap bounds what is
// stored past it while making the purge's cost per letter small.
func qfPurgeEvery(limit int) int64 { return int64(max(limit/16, 1)) }

// EvictedDeadLetters returns how many letters this node dropped at a
// bound (DeadLetterLimit, MaxGroupDeadLetters, MaxDeadLetters,
// MaxDeadLetterBytes) to make room for newer ones.
func (e *Engine) EvictedDeadLetters() int64 { return e.qfEvicted.Load() + e.dlb.evicted.Load() }

// purgeQueueFull trims the queue_full letters to the limit with one purge
// request and counts what it dropped.
func (e *Engine) purgeQueueFull(ctx context.Context) error {
	n, err := e.purgeKeep(ctx, e.prefix+".dl.qf", e.policy.DeadLetterLimit)
	e.qfEvicted.Add(n)
	return err
}

// purgeKeep trims subject to its newest keep letters with one purge
// request and returns how many it dropped.
func (e *Engine) purgeKeep(ctx context.Context, subject string, keep int) (int64, error) {
	req, _ := json.Marshal(map[string]any{"filter": subject, "keep": keep})
	msg, err := e.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+e.prefix+"_dl", req)
	if err != nil {
		return 0, unavailable("dead letter trim", err)
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("jsengine: dead letter trim: %w", err)
	}
	if resp.Error != nil || !resp.Success {
		d := "failed"
		if resp.Error != nil {
			d = resp.Error.Description
		}
		return 0, fmt.Errorf("jsengine: dead letter trim: %s", d)
	}
	return int64(resp.Purged), nil
}

// storeDeadLetter publishes dl, encoded as letterenc.go says.
func (e *Engine) storeDeadLetter(ctx context.Context, dl *engine.DeadLetter) error {
	msg, err := encodeLetter(e.dlSubject(dl), dl, e.nc.MaxPayload())
	if err != nil {
		return err
	}
	if err := e.reachable(); err != nil {
		return err
	}
	if f := e.dlb.beforeStore.Load(); f != nil {
		(*f)()
	}
	if _, err := e.js.PublishMsg(ctx, msg); err != nil {
		return unavailable("dead letter", err)
	}
	return nil
}

// trimAfterStore keeps the dead letters within their bounds after dl was
// stored. It runs after the letter's group was told (letterWriter), so the
// round trips of a trim never delay the settling of a record. A trim that
// fails is made good by the next store's.
func (e *Engine) trimAfterStore(ctx context.Context, dl *engine.DeadLetter) {
	subj := e.dlSubject(dl)
	switch {
	case dl.Reason == engine.ReasonQueueFull:
		if e.qfAdded.Add(1)%qfPurgeEvery(e.policy.DeadLetterLimit) == 0 {
			if err := e.purgeQueueFull(ctx); err != nil {
				e.log.Warn("jsengine: dead letter trim", "err", err)
			}
		}
	case dl.Group != "" && e.policy.MaxGroupDeadLetters > 0:
		n, err := e.purgeKeep(ctx, subj, e.policy.MaxGroupDeadLetters)
		e.dlb.evicted.Add(n)
		if err != nil {
			e.log.Warn("jsengine: dead letter trim", "group", dl.Group, "err", err)
		}
	}
	if err := e.trimDeadLetters(ctx); err != nil {
		e.log.Warn("jsengine: dead letter trim", "err", err)
	}
}

// AddDeadLetter stores dl, giving it an ID and time when they are empty.
// Letters with ReasonQueueFull are bounded by Policy.DeadLetterLimit,
// max_attempts letters by Policy.MaxGroupDeadLetters per group, and all
// of them by Policy.MaxDeadLetters and MaxDeadLetterBytes, the oldest
// going first.
func (e *Engine) AddDeadLetter(ctx context.Context, dl engine.DeadLetter) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if dl.ID == "" {
		dl.ID = e.newID()
	}
	if dl.Time.IsZero() {
		dl.Time = e.clock.Now()
	}
	if err := e.storeDeadLetter(ctx, &dl); err != nil {
		return err
	}
	e.trimAfterStore(ctx, &dl)
	return nil
}

type storedLetter struct {
	dl    engine.DeadLetter
	seq   uint64
	inLog bool // stored without its data, which is read from the log (letterenc.go)
}

// letters lists every stored letter, oldest first (one direct get each).
func (e *Engine) letters(ctx context.Context) ([]storedLetter, error) {
	if err := e.reachable(); err != nil {
		return nil, err
	}
	var out []storedLetter
	for seq := uint64(1); ; {
		m, err := e.dl.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(e.prefix+".dl.>"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, unavailable("dead letters", err)
		}
		seq = m.Sequence + 1
		if dl, inLog, err := decodeLetter(m); err == nil {
			out = append(out, storedLetter{dl, m.Sequence, inLog})
		}
	}
}

// visible drops from all, oldest first, the queue_full letters past the
// newest DeadLetterLimit: stored between two purges, they are already
// evicted as far as anyone can tell.
func (e *Engine) visible(all []storedLetter) []storedLetter {
	qf := 0
	for _, s := range all {
		if s.dl.Reason == engine.ReasonQueueFull {
			qf++
		}
	}
	skip := qf - e.policy.DeadLetterLimit
	if skip <= 0 {
		return all
	}
	return slices.DeleteFunc(all, func(s storedLetter) bool {
		if s.dl.Reason == engine.ReasonQueueFull && skip > 0 {
			skip--
			return true
		}
		return false
	})
}

// DeadLetters returns the letters f selects, oldest first.
func (e *Engine) DeadLetters(ctx context.Context, f engine.DeadLetterFilter) (_ []engine.DeadLetter, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	all, err := e.letters(ctx)
	if err != nil {
		return nil, err
	}
	all = e.visible(all)
	var out []engine.DeadLetter
	for _, s := range all {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		if (f.Group == "" || s.dl.Group == f.Group) && (f.Reason == "" || s.dl.Reason == f.Reason) {
			if s.inLog {
				if _, err := e.fillFromLog(ctx, &s.dl); err != nil {
					return nil, err
				}
			}
			out = append(out, s.dl)
		}
	}
	return out, nil
}
