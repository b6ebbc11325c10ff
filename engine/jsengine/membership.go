package jsengine

// Membership, in the <prefix>_live bucket whose keys expire after
// MemberTTL: each node's key and each member's key (naming its node),
// refreshed by a heartbeat every MemberTTL/3. Every node watches it and
// computes the same assignment from it: partitions sorted by (topic,
// partition) round-robin over members sorted by ID. A node delivers only
// the partitions assigned to its own members.
//
// Handover. To deliver a partition a node claims it: a compare-and-set of
// the position naming itself as holder, allowed only when the stored
// holder is nobody, itself, or a node whose key has expired. A node whose
// member no longer owns a partition stops delivering new records on it
// and, once nothing of it is in flight and no dead letter of it is being
// stored, releases it (holder cleared; see Releases in commit.go); only
// then can the new owner's node claim it. Within one node the
// in-memory engine's rule applies (the new member waits until the old
// one's leases end). A node that Closes releases everything at once and
// deletes its keys; a node that dies is taken over when its key expires.
// Leases not acked by then are redelivered by the next holder from the
// committed offset; records acked above it are not (settled.go).
//
// After an outage heartbeats resume; if the outage outlasted MemberTTL the
// node's own live keys may expire meanwhile, which it ignores for its own
// members and puts back with the next heartbeat. On a server older than
// 2.11 expired live keys leave no marker, so the heartbeat also lists the
// live bucket to notice dead nodes and members.

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

func (e *Engine) groupEntry(gp *gpart, ent jetstream.KeyValueEntry) {
	var v commitVal
	if json.Unmarshal(ent.Value(), &v) != nil {
		return
	}
	e.gmu.Lock()
	e.applyStored(gp, v, ent.Revision())
	e.gmu.Unlock()
}

// groupEvent applies a change of the group bucket, from any node.
func (e *Engine) groupEvent(ent jetstream.KeyValueEntry, initial bool) {
	if f := e.beforeGroupEvent.Load(); f != nil {
		(*f)(ent.Key())
	}
	if ent.Operation() != jetstream.KeyValuePut {
		e.groupGone(ent.Key())
		return
	}
	parts := strings.Split(ent.Key(), ".")
	switch {
	case parts[0] == "d" && len(parts) == 2:
		var def groupDef
		if json.Unmarshal(ent.Value(), &def) != nil {
			return
		}
		e.gmu.Lock()
		e.ensureGroup(dec(parts[1]), def)
		e.gmu.Unlock()
	case parts[0] == "c" && len(parts) == 5:
		var v commitVal
		if json.Unmarshal(ent.Value(), &v) != nil {
			return
		}
		inc, _ := strconv.ParseUint(parts[3], 10, 64)
		p, _ := strconv.Atoi(parts[4])
		e.gmu.Lock()
		defer e.gmu.Unlock()
		g := e.groups[dec(parts[1])]
		if g == nil {
			return
		}
		gp := g.parts[partKey{dec(parts[2]), p}]
		if gp == nil || gp.t.inc != inc {
			return
		}
		e.applyStored(gp, v, ent.Revision())
	}
}

// liveEvent applies a change of the live bucket: nodes and members coming
// and going (by Close, Leave or an expired heartbeat).
func (e *Engine) liveEvent(ent jetstream.KeyValueEntry, initial bool) {
	var val []byte
	put := ent.Operation() == jetstream.KeyValuePut
	if put {
		val = ent.Value()
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	e.liveChange(ent.Key(), put, val)
}

// reconcileLive lists the live bucket and treats keys that are gone as
// deleted: on servers without limit markers, expiry is silent. Only a
// whole listing is applied: the bucket's lister fails rather than end
// early (bounded.go), so a key is never taken for gone because the
// listing was cut before it.
func (e *Engine) reconcileLive(ctx context.Context) {
	lister, err := e.liveKV.ListKeys(ctx)
	if err != nil {
		return
	}
	present := make(map[string]bool)
	for k := range lister.Keys() {
		present[k] = true
	}
	e.gmu.Lock()
	defer e.gmu.Unlock()
	for node := range e.nodes {
		if k := "n." + node; node != e.node && !present[k] {
			e.liveChange(k, false, nil)
		}
	}
	for g, reg := range e.reg {
		for id := range reg {
			if k := memberKey(g, id); !present[k] {
				e.liveChange(k, false, nil)
			}
		}
	}
}

// liveChange applies a put or delete of a live bucket key. Caller holds gmu.
func (e *Engine) liveChange(key string, put bool, val []byte) {
	parts := strings.Split(key, ".")
	switch {
	case parts[0] == "n" && len(parts) == 2:
		node := parts[1]
		if put {
			e.nodes[node] = true
			return
		}
		if node == e.node {
			return
		}
		delete(e.nodes, node)
		// Partitions it held can be claimed now.
		for _, g := range e.groups {
			for _, gp := range g.order {
				if gp.loaded && gp.stored.Holder == node {
					e.pump(gp)
				}
			}
		}
	case parts[0] == "m" && len(parts) == 3:
		gname, id := dec(parts[1]), dec(parts[2])
		reg := e.reg[gname]
		if put {
			node := string(val)
			if g := e.groups[gname]; node == e.node && (g == nil || g.local[id] == nil) {
				return // a late echo of a member of ours that has left since
			}
			if reg == nil {
				reg = make(map[string]string)
				e.reg[gname] = reg
			}
			if reg[id] == node {
				return
			}
			reg[id] = node
		} else {
			if _, ok := reg[id]; !ok {
				return
			}
			if g := e.groups[gname]; g != nil && g.local[id] != nil {
				return // ours: expired during an outage; the heartbeat puts it back
			}
			delete(reg, id)
		}
		if g := e.groups[gname]; g != nil {
			e.rebalance(g)
		}
	}
}

// heartbeat keeps this node and its members registered in the live bucket.
func (e *Engine) heartbeat() {
	e.everyBeat(func(ctx context.Context) {
		if _, err := e.liveKV.Put(ctx, "n."+e.node, []byte("1")); err != nil {
			e.log.Warn("jsengine: heartbeat", "err", err)
		}
		e.beatMembers(ctx)
		e.refreshReplicas(ctx, false)
		if !e.liveMarkers {
			e.reconcileLive(ctx)
		}
	})
}

// everyBeat calls beat every third of the TTL, with a context bounded by
// that third, until the engine closes; it is the body of a goroutine
// counted in e.wg (heartbeat, presenceBeat).
func (e *Engine) everyBeat(beat func(ctx context.Context)) {
	defer e.wg.Done()
	t := time.NewTicker(e.ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-e.closeCh:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), e.ttl/3)
		beat(ctx)
		cancel()
	}
}

// beatMembers rewrites the live keys of this node's members. The keys are
// listed under gmu and written without it, so a member can leave between
// the two: its Leave has deleted the key, and the write here brings it
// back for every other node to see (until it expires, a member nobody
// serves would be assigned partitions). Keys of members that are no longer
// local once the writes are done are therefore deleted again.
func (e *Engine) beatMembers(ctx context.Context) {
	type beat struct{ group, id string }
	e.gmu.Lock()
	var beats []beat
	for _, g := range e.groups {
		for id := range g.local {
			beats = append(beats, beat{g.name, id})
		}
	}
	e.gmu.Unlock()
	if f := e.beforeMemberBeat.Load(); f != nil {
		(*f)()
	}
	written := beats[:0]
	for _, b := range beats {
		if _, err := e.liveKV.Put(ctx, memberKey(b.group, b.id), []byte(e.node)); err != nil {
			e.log.Warn("jsengine: heartbeat", "err", err)
			break
		}
		written = append(written, b)
	}
	var gone []beat
	e.gmu.Lock()
	for _, b := range written {
		if g := e.groups[b.group]; g == nil || g.local[b.id] == nil {
			gone = append(gone, b)
		}
	}
	e.gmu.Unlock()
	for _, b := range gone {
		if err := e.liveKV.Delete(ctx, memberKey(b.group, b.id)); err != nil {
			e.log.Warn("jsengine: heartbeat", "err", err)
			return
		}
	}
}
