package router

import (
	"cmp"

	"github.com/switchyard/switchyard/engine"
)

// GroupBounds bounds what clients may make the gateway hold in consumer
// groups: pull members (pull.go) and the leases of a session's group
// memberships (group_leases.go). The zero value of each field takes its
// default; a negative value removes the bound.
type GroupBounds struct {
	// MaxPullMembers bounds the pull members this node holds at once, one
	// per group polled here in the last minute (each leases up to 1000
	// records and pullLeasedBytes of them). Default 1000.
	MaxPullMembers int
	// MaxPullMembersPerClient bounds the pull members one client (its
	// token's subject, or its IP address without one) has made this node
	// hold: polling a group that has none here makes one. Default 64.
	MaxPullMembersPerClient int
	// MaxSessionLeases bounds the records one WebSocket session holds
	// leased over all its group memberships. Default 4 × the session's
	// queue bound (Session.QueueMessages), the number of reliable items a
	// session may have queued before it is closed with 1013.
	MaxSessionLeases int
	// MaxSessionLeaseBytes bounds, likewise, the bytes of those records.
	// Default 16 MiB.
	MaxSessionLeaseBytes int64
	// DefaultWindow is the window per partition of a group made without
	// max_in_flight: the engine's GroupPolicy.MaxInFlight, which a
	// membership's lease reservation is sized by (group_leases.go).
	// Default engine.DefaultGroupPolicy.MaxInFlight; set it to the
	// engine's when that differs, or members of new groups are held to
	// the smaller window until they rejoin.
	DefaultWindow int

	// MaxGroups bounds the consumer groups made through this gateway (by
	// a WebSocket subscribe or an HTTP poll naming a group the engine did
	// not know) that still exist (group_count.go). Default 10,000.
	MaxGroups int
	// MaxGroupBytes bounds, likewise, their bytes (name, pattern, filter
	// and groupOverhead, 4 KiB, each). Default 64 MiB.
	MaxGroupBytes int64
	// MaxGroupsPerClient bounds the groups one client (its token's
	// subject, or its IP address without one) has made through this
	// gateway that still exist. Default 1,000.
	MaxGroupsPerClient int
	// MaxGroupBytesPerClient bounds, likewise, their bytes. Default 8 MiB.
	MaxGroupBytesPerClient int64
}

// Defaults of GroupBounds.
const (
	DefaultMaxPullMembers          = 1000
	DefaultMaxPullMembersPerClient = 64
	DefaultMaxSessionLeaseBytes    = 16 << 20
	DefaultMaxGroups               = 10_000
	DefaultMaxGroupBytes           = 64 << 20
	DefaultMaxGroupsPerClient      = 1_000
	DefaultMaxGroupBytesPerClient  = 8 << 20
)

func (b GroupBounds) withDefaults(queueMessages int) GroupBounds {
	if b.MaxPullMembers == 0 {
		b.MaxPullMembers = DefaultMaxPullMembers
	}
	if b.MaxPullMembersPerClient == 0 {
		b.MaxPullMembersPerClient = DefaultMaxPullMembersPerClient
	}
	if b.MaxSessionLeases == 0 {
		b.MaxSessionLeases = 4 * queueMessages
	}
	if b.MaxSessionLeaseBytes == 0 {
		b.MaxSessionLeaseBytes = DefaultMaxSessionLeaseBytes
	}
	if b.DefaultWindow <= 0 {
		b.DefaultWindow = engine.DefaultGroupPolicy.MaxInFlight
	}
	b.MaxGroups = cmp.Or(b.MaxGroups, DefaultMaxGroups)
	b.MaxGroupBytes = cmp.Or(b.MaxGroupBytes, DefaultMaxGroupBytes)
	b.MaxGroupsPerClient = cmp.Or(b.MaxGroupsPerClient, DefaultMaxGroupsPerClient)
	b.MaxGroupBytesPerClient = cmp.Or(b.MaxGroupBytesPerClient, DefaultMaxGroupBytesPerClient)
	return b
}

// Limit labels of switchyard_limit_rejections_total for the group bounds.
const (
	limitPullMembers          = "pull_members"
	limitPullMembersPerClient = "pull_members_per_client"
	limitSessionLeases        = "session_leases"
	limitGroups               = "groups"
	limitGroupBytes           = "group_bytes"
	limitGroupsPerClient      = "groups_per_client"
	limitGroupBytesPerClient  = "group_bytes_per_client"
)
