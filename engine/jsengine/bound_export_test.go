package jsengine

import (
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/internal/lifecycle"
)

// BoundKV is kv with the engine's bounds on its round trips and listings,
// as openKV hands it to the engine's calls; the test's cleanup waits for
// the watchers its listings stop in the background, as an engine's Close
// does.
func BoundKV(t testing.TB, kv jetstream.KeyValue) jetstream.KeyValue {
	life := new(lifecycle.Guard)
	t.Cleanup(func() {
		life.Close(func() {})
		life.Wait()
	})
	return boundKV(kv, life)
}
