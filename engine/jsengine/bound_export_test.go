package jsengine

import (
	"testing"
	"time"

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

// BoundKVSlowSetup is BoundKV whose listings wait before their watcher's
// set-up and after it, as over a slow link: before, in the set-up's time;
// after, in the first key's.
func BoundKVSlowSetup(t testing.TB, kv jetstream.KeyValue, before, after time.Duration) jetstream.KeyValue {
	b := BoundKV(t, kv).(boundedKV)
	b.setupWaits = &[2]func(){func() { time.Sleep(before) }, func() { time.Sleep(after) }}
	return b
}
