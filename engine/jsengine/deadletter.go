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
// <prefix>.dl.qf for queue_full ones (trimmed to Policy.DeadLetterLimit
// with a keep-purge after each add).

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
	if dl.Reason == engine.ReasonQueueFull {
		if err := e.dl.Purge(ctx, jetstream.WithPurgeSubject(subj), jetstream.WithPurgeKeep(uint64(e.policy.DeadLetterLimit))); err != nil {
			return unavailable("dead letter trim", err)
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

// DeadLetters returns the letters f selects, oldest first.
func (e *Engine) DeadLetters(ctx context.Context, f engine.DeadLetterFilter) (_ []engine.DeadLetter, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	all, err := e.letters(ctx)
	if err != nil {
		return nil, err
	}
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

// Redrive appends the chosen letters to their topics again (same key,
// headers, data and priority; a new offset) and removes each one appended.
// With ids it takes those letters, restricted to group when group is set;
// without ids it takes every letter of group. It returns how many were
// appended and the first append error.
func (e *Engine) Redrive(ctx context.Context, group string, ids []string) (_ int, err error) {
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	if group == "" && len(ids) == 0 {
		return 0, fmt.Errorf("jsengine: redrive needs a group or ids: %w", engine.ErrInvalidConfig)
	}
	all, err := e.letters(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, s := range all {
		d := s.dl
		if (group != "" && d.Group != group) || (len(ids) > 0 && !slices.Contains(ids, d.ID)) {
			continue
		}
		// Remove first: two nodes redriving at once append a letter once.
		if err := e.dl.DeleteMsg(ctx, s.seq); err != nil {
			continue
		}
		_, err := e.Append(ctx, engine.Message{
			Topic: d.Record.Topic, Key: d.Record.Key, Headers: d.Record.Headers,
			Data: d.Record.Data, Priority: d.Record.Priority,
		})
		if err != nil {
			errs = append(errs, err)
			// Put it back so it is not lost.
			if err := e.storeDeadLetter(context.WithoutCancel(ctx), &d); err != nil {
				errs = append(errs, err)
			}
			if ctx.Err() != nil || e.closed.Load() {
				break
			}
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
