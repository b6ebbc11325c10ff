package main

// Settings of retention: the defaults of auto-created topics
// (engine.TopicConfig).

import "github.com/switchyard/switchyard/engine"

func (c *config) retentionFlags(r *registry) {
	r.in(groupRetention)
	d := engine.Defaults
	r.int(&c.Topics.Partitions, "partitions", d.Partitions, "partitions of auto-created topics")
	r.int64(&c.Topics.MaxMessages, "retention-messages", d.MaxMessages, "default records kept per partition")
	r.duration(&c.Topics.MaxAge, "retention-age", d.MaxAge, "default maximum record age (0: no limit)")
	r.string((*string)(&c.Topics.OnFull), "on-full", string(d.OnFull), `default topic full policy: "drop_oldest" or "block"`)
	r.duration(&c.Topics.BlockTimeout, "block-timeout", d.BlockTimeout, "how long a publish to a full block-policy topic waits")
}
