package memengine

import (
	"context"

	"github.com/switchyard/switchyard/engine"
)

// ReadSeen implements engine.SeenReader: the log is in memory and
// observers are told of a record as it is appended, so it is Read.
func (e *Engine) ReadSeen(topic string, partition int, from int64, limit int) ([]*engine.Record, int64, bool) {
	recs, next, err := e.Read(context.Background(), topic, partition, from, limit)
	return recs, next, err == nil
}
