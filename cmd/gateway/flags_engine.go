package main

// Settings of the engine: where the log lives.

import (
	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine/jsengine"
)

// Defaults of the gateway's own engine settings.
const (
	defaultEngine  = "memory"
	defaultDataDir = "data"
	// defaultNATSReplicas keeps one copy: a single NATS server needs no more.
	defaultNATSReplicas = 1
)

func (c *config) engineFlags(r *registry) {
	r.in(groupEngine)
	r.string(&c.Engine, "engine", defaultEngine, `log engine: "memory" (in process, lost on restart), "embedded" (JetStream in process, files in --data-dir) or "nats" (an external JetStream at --nats-url)`)
	r.string(&c.JetStream.URL, "nats-url", nats.DefaultURL, "NATS server URL(s) for --engine nats")
	r.string(&c.JetStream.Prefix, "nats-prefix", jsengine.DefaultPrefix, "name prefix of the JetStream streams and buckets; nodes with the same prefix share a log")
	r.int(&c.JetStream.Replicas, "nats-replicas", defaultNATSReplicas, "copies a NATS cluster keeps of each stream and bucket the gateway creates, 1 to 5, for --engine nats (existing ones are scaled to it; 3 survives losing one NATS server)")
	r.string(&c.DataDir, "data-dir", defaultDataDir, "directory of the log's files for --engine embedded (created if missing); one gateway per directory")
	r.string(&c.DataSync, "data-sync", defaultDataSync, `when --engine embedded syncs its files to disk: "always" (before each publish is acknowledged: survives a power loss) or a duration (that often: faster; a power loss may lose what was acknowledged since the last sync)`)
	r.string(&c.EmbedListen, "embedded-nats-listen", "", "host:port where the embedded NATS server accepts clients, for other gateway nodes (--engine nats) and NATS tools (empty: no TCP port)")
	r.bool(&c.Strict, "strict", false, "refuse publishes to topics that were not created (unknown_topic)")
}
