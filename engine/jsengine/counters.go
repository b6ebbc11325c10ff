package jsengine

import "github.com/switchyard/switchyard/engine"

// Counters returns the engine's counts of recoveries and losses an
// operator should see (engine.Counted): the gateway publishes them as
// switchyard_engine_<name>_total.
func (e *Engine) Counters() []engine.Counter {
	return []engine.Counter{
		{Name: "tail_restarts", Help: "Times the heartbeat started this node's live tail again after it had stopped behind the record stream (tail_keeper.go).", Value: e.tailRestarts.Load()},
		{Name: "tail_wait_give_ups", Help: "Appends whose wait for the live tail to announce their record gave up after the bound (the record is stored; its announcement came late or not at all).", Value: e.tailGiveUps.Load()},
		{Name: "claim_confirms_dropped", Help: "msg_id claim confirmations dropped because the confirmer's queue was full or the engine closed: the claim stays unconfirmed, and a repeat of its msg_id is answered from the record while it is in the log.", Value: e.confirmsDropped.Load()},
		{Name: "reappends", Help: "Pipelined records the stream refused (a concurrent append from another node) and this node appended again.", Value: e.reappends.Load()},
		{Name: "one_at_a_time_appends", Help: "Asynchronous appends made one at a time instead of pipelined (near a partition's cap).", Value: e.oneAtATime.Load()},
	}
}
