package memengine

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/switchyard/switchyard/engine"
)

// AddDeadLetter stores dl, giving it an ID and time when they are empty.
// Letters with ReasonQueueFull are bounded by Policy.DeadLetterLimit, the
// oldest going first; max_attempts letters are kept until redriven.
func (e *Engine) AddDeadLetter(ctx context.Context, dl engine.DeadLetter) error {
	if dl.ID == "" {
		dl.ID = e.newID()
	}
	if dl.Time.IsZero() {
		dl.Time = e.clock.Now()
	}
	e.addDeadLetter(&dl)
	return nil
}

func (e *Engine) addDeadLetter(dl *engine.DeadLetter) {
	e.dlMu.Lock()
	defer e.dlMu.Unlock()
	e.deadLetters = append(e.deadLetters, dl)
	if dl.Reason != engine.ReasonQueueFull {
		return
	}
	e.queueFull++
	if e.queueFull <= e.policy.DeadLetterLimit {
		return
	}
	i := slices.IndexFunc(e.deadLetters, func(d *engine.DeadLetter) bool { return d.Reason == engine.ReasonQueueFull })
	e.deadLetters = slices.Delete(e.deadLetters, i, i+1)
	e.queueFull--
}

// DeadLetters returns the letters f selects, oldest first.
func (e *Engine) DeadLetters(ctx context.Context, f engine.DeadLetterFilter) ([]engine.DeadLetter, error) {
	e.dlMu.Lock()
	defer e.dlMu.Unlock()
	var out []engine.DeadLetter
	for _, d := range e.deadLetters {
		if f.Limit > 0 && len(out) >= f.Limit {
			break
		}
		if (f.Group == "" || d.Group == f.Group) && (f.Reason == "" || d.Reason == f.Reason) {
			out = append(out, *d)
		}
	}
	return out, nil
}

// Redrive appends the chosen letters to their topics again (same key,
// headers, data and priority; a new offset) and removes each one appended.
// With ids it takes those letters, restricted to group when group is set;
// without ids it takes every letter of group. It returns how many were
// appended and the first append error.
func (e *Engine) Redrive(ctx context.Context, group string, ids []string) (int, error) {
	if group == "" && len(ids) == 0 {
		return 0, fmt.Errorf("memengine: redrive needs a group or ids: %w", engine.ErrInvalidConfig)
	}
	e.dlMu.Lock()
	var chosen []*engine.DeadLetter
	for _, d := range e.deadLetters {
		if (group == "" || d.Group == group) && (len(ids) == 0 || slices.Contains(ids, d.ID)) {
			chosen = append(chosen, d)
		}
	}
	e.dlMu.Unlock()

	n := 0
	var errs []error
	for _, d := range chosen {
		_, err := e.Append(ctx, engine.Message{
			Topic:    d.Record.Topic,
			Key:      d.Record.Key,
			Headers:  d.Record.Headers,
			Data:     d.Record.Data,
			Priority: d.Record.Priority,
		})
		if err != nil {
			errs = append(errs, err)
			if ctx.Err() != nil || e.closed.Load() {
				break
			}
			continue
		}
		e.dlMu.Lock()
		if i := slices.Index(e.deadLetters, d); i >= 0 {
			e.deadLetters = slices.Delete(e.deadLetters, i, i+1)
			if d.Reason == engine.ReasonQueueFull {
				e.queueFull--
			}
		}
		e.dlMu.Unlock()
		n++
	}
	return n, errors.Join(errs...)
}
