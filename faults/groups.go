package faults

// The consumer-group load: one member per gateway in one group on its own
// topic, acking every delivery; checked at least once (every record
// acked or dead-lettered) and never delivered after its ack was
// acknowledged.

import (
	"context"
	"fmt"
	"time"
)

// groupName is the load's consumer group.
const groupName = "faults-g"

// groupState is what the members saw; guarded by load.mu.
type groupState struct {
	acked      map[int64]ackSeen // offsets whose ack was acknowledged
	deliveries int
	ackErrors  int
	moved      chan struct{} // one send (when room) per acknowledged ack
}

// ackSeen is an acknowledged ack: by which member, when.
type ackSeen struct {
	member int
	at     time.Time
}

// member joins the group on gateway url and acks every delivery until
// ctx ends, joining again after a refusal or a dropped connection.
func (l *load) member(ctx context.Context, client int, url string) {
	defer l.wg.Done()
	for ctx.Err() == nil {
		w, err := dialWS(ctx, url)
		if err != nil {
			pause(ctx, retryPause)
			continue
		}
		if err := w.send(ctx, map[string]any{"op": "subscribe", "id": 1, "pattern": l.jobs, "group": groupName}); err != nil {
			w.close()
			continue
		}
		pending := map[int64]int64{} // ack request id -> offset
		id := int64(1)
		for {
			f, err := w.read(ctx)
			if err != nil {
				break
			}
			switch f.Op {
			case "message":
				l.h.Delivered(client, l.jobs+"/0", f.Offset, f.Data)
				l.mu.Lock()
				l.group.deliveries++
				prev, again := l.group.acked[f.Offset]
				l.mu.Unlock()
				if again {
					l.violate("member %d: offset %d delivered again %v after member %d's ack of it was acknowledged (acked %s)",
						client, f.Offset, time.Since(prev.at).Round(time.Millisecond), prev.member, l.sinceMarks(prev.at))
				}
				id++
				pending[id] = f.Offset
				if err := w.send(ctx, map[string]any{"op": "ack", "id": id, "group": groupName, "topic": l.jobs,
					"partition": f.Partition, "offset": f.Offset}); err != nil {
					w.close()
				}
			case "acked":
				off, ok := pending[f.ID]
				delete(pending, f.ID)
				if !ok {
					continue
				}
				l.mu.Lock()
				l.group.acked[off] = ackSeen{member: client, at: time.Now()}
				l.mu.Unlock()
				select {
				case l.group.moved <- struct{}{}:
				default:
				}
			case "error":
				if _, ok := pending[f.ID]; ok {
					// A failed ack leaves the record leased: it comes
					// back after the ack timeout.
					delete(pending, f.ID)
					l.mu.Lock()
					l.group.ackErrors++
					l.mu.Unlock()
					continue
				}
				if f.Code != "unavailable" {
					l.violate("member %d: error %s %s", client, f.Code, f.Message)
				}
				pause(ctx, retryPause)
				w.close()
			}
		}
		w.close()
	}
}

// waitGroup waits until every offset below n is acked or in dead, or ctx
// ends.
func (l *load) waitGroup(ctx context.Context, n int64, dead map[int64]bool) error {
	for {
		l.mu.Lock()
		var missing []int64
		for o := int64(0); o < n; o++ {
			if _, ok := l.group.acked[o]; !ok && !dead[o] {
				missing = append(missing, o)
			}
		}
		l.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-l.group.moved:
		case <-ctx.Done():
			if len(missing) > 10 {
				missing = missing[:10]
			}
			return fmt.Errorf("group: records neither acked nor dead-lettered, first %v: %w", missing, ctx.Err())
		}
	}
}
