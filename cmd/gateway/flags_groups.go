package main

// Settings of consumer groups: delivery, redelivery, pull members, the
// leases of a session and dead letters.

import (
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

func (c *config) groupFlags(r *registry) {
	r.in(groupGroups)
	p := engine.DefaultGroupPolicy
	r.duration(&c.AckTimeout, "ack-timeout", p.AckTimeout, "group delivery lease before redelivery")
	r.int(&c.MaxAttempts, "max-attempts", p.MaxAttempts, "group delivery attempts before a dead letter")
	r.duration(&c.BackoffMin, "backoff-min", p.BackoffMin, "first redelivery backoff (doubles per attempt)")
	r.duration(&c.BackoffMax, "backoff-max", p.BackoffMax, "redelivery backoff cap")
	r.int(&c.MaxInFlight, "max-in-flight", p.MaxInFlight, "unacked records per group, topic and partition")
	r.duration(&c.DedupeWindow, "dedupe-window", p.DedupeWindow, "msg_id deduplication window")
	r.duration(&c.IdleTTL, "group-idle-ttl", p.IdleTTL, "delete a consumer group (and its positions) after it has had no member this long (0: keep groups)")
	g := &c.Router.Groups
	r.int(&g.MaxPullMembers, "max-pull-members", router.DefaultMaxPullMembers, "HTTP pull members this gateway holds at once (one per group polled here in the last minute); a poll that would make another gets 429 too_many_subscriptions (negative: no bound)")
	r.int(&g.MaxPullMembersPerClient, "max-pull-members-per-client", router.DefaultMaxPullMembersPerClient, "pull members one client (token subject, or IP without one) may make this gateway hold; past it 429 too_many_subscriptions (negative: no bound)")
	r.int(&g.MaxSessionLeases, "max-session-leases", 0, "records one WebSocket session may hold leased over all its group memberships; past it deliveries pause until it acks, and a subscribe that finds none left gets too_many_subscriptions (0: 4 × --queue-messages; negative: no bound)")
	r.int(&g.MaxGroups, "max-groups", router.DefaultMaxGroups, "consumer groups made through this gateway (a subscribe or poll naming a new group) that still exist; past it too_many_subscriptions (HTTP 429) until groups are deleted or expire (--group-idle-ttl) (negative: no bound)")
	r.int64(&g.MaxGroupBytes, "max-group-bytes", router.DefaultMaxGroupBytes, "bytes of those groups (name, pattern, filter and 4 KiB each), as --max-groups (negative: no bound)")
	r.int(&g.MaxGroupsPerClient, "max-groups-per-client", router.DefaultMaxGroupsPerClient, "consumer groups one client (token subject, or IP without one) made through this gateway that still exist, as --max-groups (negative: no bound)")
	r.int64(&g.MaxGroupBytesPerClient, "max-group-bytes-per-client", router.DefaultMaxGroupBytesPerClient, "bytes of one client's groups, as --max-groups-per-client (negative: no bound)")
	r.int64(&g.MaxSessionLeaseBytes, "max-session-lease-bytes", router.DefaultMaxSessionLeaseBytes, "bytes of the records one WebSocket session may hold leased over all its group memberships, as --max-session-leases (negative: no bound)")
	r.int(&c.MaxGroupDeadLetters, "max-group-dead-letters", p.MaxGroupDeadLetters, "max_attempts dead letters kept per group until redriven; past it the group's oldest letter is dropped (switchyard_dead_letters_evicted_total) (negative: no bound)")
	r.int(&c.MaxDeadLetters, "max-dead-letters", p.MaxDeadLetters, "dead letters kept in all, both reasons; past it the oldest letter is dropped (negative: no bound)")
	r.int64(&c.MaxDeadLetterBytes, "max-dead-letter-bytes", p.MaxDeadLetterBytes, "bytes of the dead letters kept in all (memory engine: data, key, headers and error; JetStream: as the stream stores them); past it the oldest letters are dropped (negative: no bound)")
	r.float(&c.DeadLetterRate, "dead-letter-rate", router.DefaultDeadLetterRate, "queue_full dead letters recorded per second per plain subscription (negative: none; inf: every drop); drops stay counted and reported as gaps")
	r.int(&c.DeadLetterBurst, "dead-letter-burst", router.DefaultDeadLetterBurst, "burst of --dead-letter-rate")
}

// groupPolicy is the engine's group policy: --group-idle-ttl 0 keeps
// groups, which the engine spells as a negative IdleTTL.
func groupPolicy(cfg config) engine.GroupPolicy {
	p := cfg.GroupPolicy
	p.IdleTTL = idleTTL(p.IdleTTL)
	return p.WithDefaults(engine.DefaultGroupPolicy)
}

// idleTTL maps --group-idle-ttl onto engine.GroupPolicy.IdleTTL, where 0
// means the default and a negative value keeps groups.
func idleTTL(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}
