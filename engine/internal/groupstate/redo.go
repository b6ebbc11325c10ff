package groupstate

import (
	"slices"

	"github.com/switchyard/switchyard/engine"
)

// Redeliver hands r, a record of the window's partition that the group
// dead-lettered, back to the window to be delivered again at its own
// offset with a fresh attempt count. It returns the flight that will
// deliver it, Ready with no attempts, or nil when one already does:
//
//   - below Committed, a new flight in Redo (the committed offset does not
//     move back), unless Redo holds one for the offset not yet done;
//   - in [Committed, Next), its flight, Ready again when it was Done (or
//     once its letter is stored, when it is Storing); one not yet done is
//     delivered anyway;
//   - at or past Next, nothing: the window reaches it in its turn.
//
// The caller pumps afterwards.
func (w *Window) Redeliver(r *engine.Record) *Flight {
	off := r.Offset
	switch {
	case off >= w.Next:
		return nil
	case off >= w.Committed:
		return w.Flights[off-w.Committed].reopen(r)
	}
	i, found := slices.BinarySearchFunc(w.Redo, off, func(f *Flight, off int64) int {
		switch {
		case f.Rec.Offset < off:
			return -1
		case f.Rec.Offset > off:
			return 1
		}
		return 0
	})
	if found {
		return w.Redo[i].reopen(r)
	}
	f := &Flight{Rec: r}
	w.Redo = slices.Insert(w.Redo, i, f)
	return f
}

// reopen makes a Done flight Ready for r with no attempts, marks a Storing
// one to be Ready once its letter is stored, and returns it; nil for a
// flight still being delivered.
func (f *Flight) reopen(r *engine.Record) *Flight {
	switch f.State {
	case Done:
		f.stop()
		f.State, f.Attempt, f.LastErr, f.Rec = Ready, 0, "", r
		return f
	case Storing:
		f.again = true
		return f
	}
	return nil
}
