package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// Dead letters live in the <prefix>_dl stream, one JSON message each:
// <prefix>.dl.ma for max_attempts letters (kept until redriven) and
// <prefix>.dl.qf for queue_full ones, bounded by Policy.DeadLetterLimit.
// At the cap a queue_full letter costs one publish: every node purges the
// subject down to the limit once per qfPurgeEvery of its adds (one round
// trip for the batch, whose reply says exactly how many letters it
// dropped, counted in EvictedDeadLetters), and listings show only the
// newest DeadLetterLimit queue_full letters, so the few stored past the
// cap between purges are never seen.

// letterJob is a max_attempts letter waiting for the letter writer, and
// how to tell its group the outcome.
type letterJob struct {
	dl     *engine.DeadLetter
	settle func(error) // called with gmu held
}

// letterWriter stores the max_attempts letters groups queue (see
// Engine.deadLetter), each publish bounded by 5 s, with no lock held
// across it; then it settles each letter's flight under gmu. It exits when
// the engine closes: letters still queued then are not stored, and their
// records stay owed (the next holder dead-letters them again).
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
			if e.closed.Load() {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ctx, done := e.onConn(ctx)
			err := done(e.storeDeadLetter(ctx, j.dl))
			cancel()
			if err != nil {
				e.log.Warn("jsengine: dead letter not stored; retrying", "group", j.dl.Group,
					"topic", j.dl.Record.Topic, "offset", j.dl.Record.Offset, "err", err)
			}
			e.gmu.Lock()
			j.settle(err)
			e.gmu.Unlock()
		}
	}
}

func (e *Engine) dlSubject(reason string) string {
	if reason == engine.ReasonQueueFull {
		return e.prefix + ".dl.qf"
	}
	return e.prefix + ".dl.ma"
}

// qfPurgeEvery is how many queue_full letters a node adds between purges
// of the subject down to limit: a sixteenth of the cap bounds what is
// stored past it while making the purge's cost per letter small.
func qfPurgeEvery(limit int) int64 { return int64(max(limit/16, 1)) }

// EvictedDeadLetters returns how many queue_full letters this node's
// purges dropped at the DeadLetterLimit cap to make room for newer ones.
func (e *Engine) EvictedDeadLetters() int64 { return e.qfEvicted.Load() }

// purgeQueueFull trims the queue_full letters to the limit with one purge
// request and counts what it dropped.
func (e *Engine) purgeQueueFull(ctx context.Context) error {
	req, _ := json.Marshal(map[string]any{"filter": e.dlSubject(engine.ReasonQueueFull), "keep": e.policy.DeadLetterLimit})
	msg, err := e.nc.RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+e.prefix+"_dl", req)
	if err != nil {
		return unavailable("dead letter trim", err)
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("jsengine: dead letter trim: %w", err)
	}
	if resp.Error != nil || !resp.Success {
		d := "failed"
		if resp.Error != nil {
			d = resp.Error.Description
		}
		return fmt.Errorf("jsengine: dead letter trim: %s", d)
	}
	e.qfEvicted.Add(int64(resp.Purged))
	return nil
}

func (e *Engine) storeDeadLetter(ctx context.Context, dl *engine.DeadLetter) error {
	b, err := json.Marshal(dl)
	if err != nil {
		return fmt.Errorf("jsengine: dead letter: %w", err)
	}
	if err := e.reachable(); err != nil {
		return err
	}
	subj := e.dlSubject(dl.Reason)
	if _, err := e.js.Publish(ctx, subj, b); err != nil {
		return unavailable("dead letter", err)
	}
	if dl.Reason == engine.ReasonQueueFull && e.qfAdded.Add(1)%qfPurgeEvery(e.policy.DeadLetterLimit) == 0 {
		if err := e.purgeQueueFull(ctx); err != nil {
			// Stored; the next batch's purge trims what this one left.
			e.log.Warn("jsengine: dead letter trim", "err", err)
		}
	}
	return nil
}

// AddDeadLetter stores dl, giving it an ID and time when they are empty.
// Letters with ReasonQueueFull are bounded by Policy.DeadLetterLimit, the
// oldest going first; max_attempts letters are kept until redriven.
func (e *Engine) AddDeadLetter(ctx context.Context, dl engine.DeadLetter) (err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if dl.ID == "" {
		dl.ID = e.newID()
	}
	if dl.Time.IsZero() {
		dl.Time = e.clock.Now()
	}
	return e.storeDeadLetter(ctx, &dl)
}

type storedLetter struct {
	dl  engine.DeadLetter
	seq uint64
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
		var dl engine.DeadLetter
		if json.Unmarshal(m.Data, &dl) == nil {
			out = append(out, storedLetter{dl, m.Sequence})
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
			out = append(out, s.dl)
		}
	}
	return out, nil
}
