package jsengine

import "github.com/nats-io/nats.go/jetstream"

// BoundKV is kv with the engine's bounds on its round trips and listings,
// as openKV hands it to the engine's calls.
func BoundKV(kv jetstream.KeyValue) jetstream.KeyValue { return boundKV(kv) }
