package jsengine

// HoldConnWatcher makes the connection watcher wait, before it applies a
// status change it has taken, until release is called. Calls that start a
// round trip wait too: hold it only while nothing else is called.
func (e *Engine) HoldConnWatcher() (release func()) {
	e.connMu.Lock()
	return e.connMu.Unlock
}

// PendingStatusChanges is how many status changes wait in the connection
// watcher's channel.
func (e *Engine) PendingStatusChanges() int { return len(e.statusCh) }

// StopTailConsumer stops the live tail's consumer, as a consumer that
// stopped delivering for good would be.
func (e *Engine) StopTailConsumer() {
	e.tailCCMu.Lock()
	defer e.tailCCMu.Unlock()
	e.tailCC.Stop()
	<-e.tailCC.Closed()
}

// TailRestarts is how many times the heartbeat started the tail again.
func (e *Engine) TailRestarts() int64 { return e.tailRestarts.Load() }
