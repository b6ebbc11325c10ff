package main

// Settings of limits: what one client, session or request may make the
// gateway hold or do. SECURITY.md lists each with what a client sees past
// it.

import (
	"fmt"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

func (c *config) limitFlags(r *registry) {
	r.in(groupLimits)
	o := &c.Router
	r.int(&c.QueueMessages, "queue-messages", session.DefaultQueueMessages, "outbound queue bound per session, in message frames")
	r.int(&c.ControlBytes, "control-queue-bytes", session.DefaultControlBytes, "bytes of replies and errors a session may leave unread before it is closed with 1008")
	r.duration(&c.MessageTimeout, "message-timeout", session.DefaultMessageTimeout, "time an inbound message (all its fragments) may take to arrive before the session is closed with 1008")
	r.int64(&c.ReadLimit, "max-frame-bytes", 0, fmt.Sprintf("largest inbound WebSocket message, fragments included (close 1009 past it); 0: --max-message-bytes plus the largest publish envelope that --max-key-bytes, --max-msg-id-bytes, --max-header-bytes, --max-headers, --max-topic-bytes and --max-id-bytes allow, escaped (%d bytes with the defaults), so that a publish over --max-message-bytes gets message_too_large and its session stays open", router.DefaultMaxMessageBytes+router.PublishEnvelopeBytes(router.Bounds{})))
	r.int(&o.MaxMessageBytes, "max-message-bytes", router.DefaultMaxMessageBytes, "largest publish data, as written in the frame (message_too_large)")
	r.int64(&c.MaxInboundPartialBytes, "max-inbound-partial-bytes", router.DefaultMaxInboundPartialBytes, "read buffers all sessions' unfinished inbound messages may hold together; past it a reader waits within its --message-timeout (negative: no gateway-wide bound)")
	r.int(&o.MaxSubscriptions, "max-subscriptions", router.DefaultMaxSubscriptions, "subscriptions per session")
	r.int(&o.MaxLast, "max-last", router.DefaultMaxLast, `largest N of a subscribe's "from": {"last": N} (records per matched partition)`)
	r.float(&o.PublishRate, "publish-rate", 0, "publishes per second per session (0: unlimited)")
	r.int(&o.PublishPipeline, "publish-pipeline", router.DefaultPublishPipeline, "publishes in flight per WebSocket session; past it the session's reader waits (1: one at a time)")
	r.int(&o.PublishPipelineBytes, "publish-pipeline-bytes", router.DefaultPublishPipelineBytes, "data bytes of the publishes in flight per WebSocket session; past it the session's reader waits")
	r.int(&o.MaxConnections, "max-connections", 0, "open WebSocket sessions (0: unlimited)")
	r.int(&o.MaxConnectionsPerIP, "max-connections-per-ip", 0, "open WebSocket sessions per client IP (0: unlimited)")
	r.float(&o.ConnectRatePerIP, "connect-rate-per-ip", 0, "WebSocket and SSE connects a client IP may attempt per second, checked before any token check or hook (0: unlimited)")
	r.float(&o.HTTPPublishRate, "http-publish-rate", 0, "HTTP publishes per second per client IP (0: unlimited); each record of a batch counts")
	r.int(&o.MaxPublishBatch, "max-publish-batch", router.DefaultMaxPublishBatch, `records of one batch publish (POST /v1/publish {"records":[…]}); past it 400 bad_request`)
	r.int64(&o.MaxPublishBatchBytes, "max-publish-batch-bytes", router.DefaultMaxPublishBatchBytes, "body bytes of one batch publish; past it 413 message_too_large")
	r.int(&o.MaxTopics, "max-topics", 0, "topics that may exist, not counting $ topics (0: unlimited)")
	r.int(&o.MaxPartitions, "max-partitions", engine.MaxPartitions, "partitions of a topic created over HTTP")
	c.nameFlags(r)
	r.int(&o.MaxPresencePerTopic, "max-presence-per-topic", router.DefaultMaxPresencePerTopic, "members a topic's presence lists and announces; beyond it they are only counted")
	r.float(&o.Presence.JoinRate, "presence-join-rate", router.DefaultPresenceJoinRate, "presence joins (subscribes with presence) per second per session; past it rate_limited (negative: unlimited)")
	r.int(&o.Presence.JoinBurst, "presence-join-burst", router.DefaultPresenceJoinBurst, "presence joins a session may make at once")
	r.int(&o.Presence.QueueBytes, "presence-queue-bytes", router.DefaultPresenceQueueBytes, "control bytes a member may have queued for presence join/leave frames to be queued to it; past it they are dropped and a resync frame follows (at most half of --control-queue-bytes)")
	r.int(&o.SSE.MaxPositions, "sse-max-positions", router.DefaultSSEMaxPositions, "positions (pattern, topic, partition) a Server-Sent Events stream keeps for its resumption, and that a Last-Event-ID of the earlier self-contained form may name (400 past it)")
	r.int(&o.SSE.MaxTokenBytes, "sse-max-token-bytes", router.DefaultSSEMaxTokenBytes, "largest Last-Event-ID of a Server-Sent Events stream (400 past it)")
	r.duration(&o.SSE.ResumeTTL, "sse-resume-ttl", router.DefaultSSEResumeTTL, "how long an ended Server-Sent Events stream stays resumable by its last event id")
	r.int64(&o.SSE.ResumeBytes, "sse-resume-bytes", router.DefaultSSEResumeBytes, "memory for the positions of ended Server-Sent Events streams kept for resumption; past it the oldest are forgotten")
	r.duration(&o.Tickets.TTL, "ticket-ttl", router.DefaultTicketTTL, "how long a connection ticket of POST /v1/tickets may wait for its WebSocket upgrade or SSE stream")
	r.int(&o.Tickets.MaxTickets, "max-tickets", router.DefaultMaxTickets, "unused connection tickets the gateway holds (503 past it)")
	r.int64(&o.Tickets.MaxBytes, "max-ticket-bytes", router.DefaultMaxTicketBytes, "bytes of the credentials unused connection tickets hold (503 past it)")
}

// nameFlags declares the bounds on names, keys, headers, filters and ids
// (router.Bounds).
func (c *config) nameFlags(r *registry) {
	b := &c.Bounds
	r.int(&b.MaxTopicBytes, "max-topic-bytes", router.DefaultMaxTopicBytes, "longest topic or pattern in bytes, at most 255 (invalid_topic / invalid_pattern)")
	r.int(&b.MaxTopicDepth, "max-topic-depth", router.DefaultMaxTopicDepth, "most segments of a topic or pattern, at most 16 (invalid_topic / invalid_pattern)")
	r.int(&b.MaxKeyBytes, "max-key-bytes", router.DefaultMaxKeyBytes, "longest publish key in bytes (bad_request)")
	r.int(&b.MaxMsgIDBytes, "max-msg-id-bytes", router.DefaultMaxMsgIDBytes, "longest publish msg_id in bytes (bad_request)")
	r.int(&b.MaxHeaders, "max-headers", router.DefaultMaxHeaders, "most headers of one publish (bad_request)")
	r.int(&b.MaxHeaderBytes, "max-header-bytes", router.DefaultMaxHeaderBytes, "bytes of one publish's header names and values (bad_request)")
	r.int(&b.MaxFilterHeaders, "max-filter-headers", router.DefaultMaxFilterHeaders, "most header pairs of one subscription filter (bad_request)")
	r.int(&b.MaxFilterBytes, "max-filter-bytes", router.DefaultMaxFilterBytes, "bytes of one subscription filter (bad_request)")
	r.int(&b.MaxSessionFilterBytes, "max-session-filter-bytes", router.DefaultMaxSessionFilterBytes, "bytes of all of a session's subscription filters (bad_request)")
	r.int(&b.MaxDeltaPartitions, "delta-max-partitions", router.DefaultMaxDeltaPartitions, `partitions one "delta":"fossil" subscription gets deltas on; messages of further partitions are sent full`)
	r.int(&b.MaxDeltaBases, "delta-max-bases", router.DefaultMaxDeltaBases, "partitions holding a base record (the last record sent) for delta subscriptions; past it a partition's messages are sent full")
	r.int(&b.MaxDeltaBaseBytes, "delta-max-base-bytes", router.DefaultMaxDeltaBaseBytes, "payload bytes of those base records; past it the next message is sent full")
	r.int(&b.MaxIDBytes, "max-id-bytes", router.DefaultMaxIDBytes, `longest request "id" in bytes; longer ids get bad_request without the id`)
}
