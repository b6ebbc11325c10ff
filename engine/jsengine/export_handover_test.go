package jsengine

import (
	"context"
	"fmt"
)

// StoredPosition returns the JSON of a group's position on one partition
// of a topic this node knows, as the group bucket holds it now.
func (e *Engine) StoredPosition(ctx context.Context, group, topic string, partition int) (string, error) {
	t := e.local(topic)
	if t == nil {
		return "", fmt.Errorf("topic %q unknown here", topic)
	}
	ent, err := e.groupKV.Get(ctx, commitKey(group, t, partition))
	if err != nil {
		return "", err
	}
	return string(ent.Value()), nil
}

// PositionKeyPrefix is the start of the group bucket keys of a group's
// positions on a topic (any incarnation, any partition).
func PositionKeyPrefix(group, topic string) string {
	return "c." + enc(group) + "." + enc(topic) + "."
}

// SetBeforeGroupFetch makes every group fetch call f in its goroutine
// before it reads from NATS.
func (e *Engine) SetBeforeGroupFetch(f func()) { e.beforeFetch.Store(&f) }
