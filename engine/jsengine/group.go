package jsengine

// Consumer groups: shared state, in the <prefix>_groups bucket: each
// group's definition (pattern, filter, start), created atomically by the
// first Join on any node, and per (group, topic incarnation, partition) a
// position: the committed offset, records skipped by retention, and the
// holder, the node currently delivering that partition. KV positions
// rather than durable JetStream consumers because the engine's semantics
// are per partition (one member at a time, offset order, MaxInFlight,
// skips, seeks by offset or time) while a durable consumer spans a filter
// and cannot be moved between members or seeked without deleting it;
// positions in a bucket are cheap, visible to every node, and updated
// with compare-and-set.
//
// This file holds the group types and keys, which topics a group reads,
// and the assignment of partitions to members (rebalance). Cursors are in
// cursor.go, the committer in commit.go, membership in membership.go and
// the public API in groupapi.go and lifecycle.go.

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
	"github.com/switchyard/switchyard/trie"
)

// groupDef is a group's fixed definition in the group bucket.
// groupTable is every group this node knows, the live registry and the
// committer's work. gmu also guards each partition's group cursors
// (partition.gparts, pumped, reading) and every group's and cursor's
// state.
type groupTable struct {
	gmu     sync.Mutex // guards following, partition.gparts/floor state and every group
	groups  map[string]*group
	flights groupstate.Machine[*gpart]   // set by New, then read-only
	reg     map[string]map[string]string // group -> member -> node (the live registry)
	nodes   map[string]bool              // live nodes
	dirty   map[*gpart]struct{}          // commits to write
	kick    chan struct{}                // capacity 1: wakes the committer
	// lateLetter is set while the letter writer applies the outcome of a
	// letter whose publish was under way when Close began: its flight
	// settles although the engine is closed (see Engine.waitLetter).
	lateLetter bool

	groupFetches atomic.Int64 // group fetches from NATS started (fetchAhead)
	// beforeFetch, when set (by tests), runs in a group fetch's goroutine
	// before it reads from NATS.
	beforeFetch atomic.Pointer[func()]
}

type groupDef struct {
	Pattern string            `json:"pattern"`
	Filter  map[string]string `json:"filter,omitempty"`
	From    engine.Start      `json:"from"`
	// MaxInFlight is the group's window per partition; 0 in definitions
	// stored before it existed: the policy's default.
	MaxInFlight int `json:"max_in_flight,omitempty"`
}

// commitVal is a group's position on one partition in the group bucket.
// Holder is the node delivering the partition ("" when none); By is the
// node that wrote the value. Leases are the delivery attempts started on
// the records not yet done, written before each attempt reaches a member,
// so a node that takes the partition over continues their counts. Redo
// lists the redriven records below Off still to be delivered again (the
// holder's), Asked the redrives asked for by any node and not yet taken
// up by a holder (see redrive.go). Done lists the runs of records settled
// above Off (acked past a record not yet settled), which the next holder
// does not deliver again (see settled.go).
type commitVal struct {
	Off     int64   `json:"off"`
	Skipped int64   `json:"skipped,omitempty"`
	Holder  string  `json:"holder,omitempty"`
	By      string  `json:"by,omitempty"`
	Leases  []lease `json:"leases,omitempty"`
	Redo    []int64 `json:"redo,omitempty"`
	Asked   []ask   `json:"asked,omitempty"`
	Done    []span  `json:"done,omitempty"`
}

// lease is one record's delivery attempts started so far.
type lease struct {
	Off      int64 `json:"o"`
	Attempts int   `json:"a"`
}

func (v commitVal) marshal() []byte {
	b, _ := json.Marshal(v)
	return b
}

func (v commitVal) equal(w commitVal) bool {
	return v.Off == w.Off && v.Skipped == w.Skipped && v.Holder == w.Holder && v.By == w.By && slices.Equal(v.Leases, w.Leases) &&
		slices.Equal(v.Redo, w.Redo) && slices.Equal(v.Asked, w.Asked) && slices.Equal(v.Done, w.Done)
}

// attempts returns the attempts the value records for offset off.
func (v commitVal) attempts(off int64) int {
	for _, l := range v.Leases {
		if l.Off == off {
			return l.Attempts
		}
	}
	return 0
}

func defKey(g string) string       { return "d." + enc(g) }
func memberKey(g, m string) string { return "m." + enc(g) + "." + enc(m) }
func commitKey(g string, t *topic, p int) string {
	return fmt.Sprintf("c.%s.%s.%d.%d", enc(g), enc(t.name), t.inc, p)
}

// group is a consumer group as this node sees it. Every field, and
// everything reachable from it, is guarded by Engine.gmu.
type group struct {
	name  string
	def   groupDef
	local map[string]*groupstate.Member // members connected to this node
	parts map[partKey]*gpart
	order []*gpart // parts sorted by (topic, partition); rebuilt by rebalance

	idle    engine.Timer // idle expiry, armed while no node has a member
	idleGen uint64       // bumped whenever idle is disarmed
}

func (g *group) matches(topic string) bool { return trie.Matches(g.def.Pattern, topic) }

type partKey struct {
	topic     string
	partition int
}

// gpart is a group's cursor on one partition. Every node has one for each
// partition a group reads; only the node holding it (holding) delivers.
type gpart struct {
	g       *group
	t       *topic
	p       *partition
	key     string
	start   engine.Start       // where a cursor with no stored position starts
	owner   string             // assigned member ID, "" when the group has none
	member  *groupstate.Member // the owner when it is on this node
	removed bool
	pumped  bool // listed in p.pumped
	// parked: parkAfter tail records in a row found the cursor, held here,
	// unable to take one (its window or its member's full, or draining),
	// so records no longer pump it; the ack, nack, timeout, claim or
	// rebalance that gives it room takes it back (pump). room is what the
	// last pump found; useless counts those records.
	parked  bool
	room    bool
	useless uint8
	reading bool // listed in p.reading

	stored    commitVal // last value seen in the bucket
	storedRev uint64
	loaded    bool
	acquiring bool   // a claim is queued for the committer
	seeking   int    // Seeks of this node being written while not holding (seekOne)
	seeks     uint64 // Seeks of this node applied while holding (seekOne)

	holding     bool             // this node delivers the partition
	ahead       []*engine.Record // records fetched from NATS past the cache
	aheadEnd    int64            // the offset after ahead's last record
	aheadSeq    uint64           // the stream sequence after it
	fetching    bool             // a fetchAhead is running
	viewing     bool             // a loadView is running
	lost        bool             // held since a claim from a holder that died
	rel         *commitVal       // what this node hands back and has not yet written (see commit.go)
	redrives                     // redriven records waiting to be delivered again
	settledRuns                  // records settled above the committed offset, from the bucket

	groupstate.Window // this node's window while holding
}

// leases returns the attempts started on gp's records not yet done; with
// ahead, a Ready record counts the attempt it is about to get. Caller
// holds gmu.
func (gp *gpart) leases(ahead bool) []lease {
	var out []lease
	for f := range gp.All {
		a := f.Attempt
		if ahead && f.State == groupstate.Ready {
			a++
		}
		if f.State != groupstate.Done && a > 0 {
			out = append(out, lease{f.Rec.Offset, a})
		}
	}
	return out
}

// heldLeases returns the leases to write while gp is held or as it is let
// go: its window's (see leases) and those of the value read from the
// bucket that the window has not reached yet, past Next or waiting to be
// redelivered with their attempts continued. Without the latter a node
// that let a partition go soon after claiming it, while its window was
// still being fetched, would hand the records back with no attempts, and
// their counts would start again. Sorted by offset. Caller holds gmu.
func (gp *gpart) heldLeases(ahead bool) []lease {
	out := gp.leases(ahead)
	for _, l := range gp.stored.Leases {
		if l.Off >= gp.Next || gp.resume[l.Off] && slices.Contains(gp.want, l.Off) {
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b lease) int { return cmp.Compare(a.Off, b.Off) })
	return out
}

// storing reports whether a flight of gp's window waits for its dead
// letter to be stored. Caller holds gmu.
func (gp *gpart) storing() bool {
	for f := range gp.All {
		if f.State == groupstate.Storing {
			return true
		}
	}
	return false
}

// dropWindow forgets every flight, stopping its timers, the records
// fetched for them and the settled runs read from the bucket.
func (gp *gpart) dropWindow() {
	gp.Drop()
	gp.ahead = nil
	gp.redrives.drop()
	gp.above, gp.doneAbove = nil, 0
}

// position is where the group stands: this node's cursor while it holds
// the partition, else the bucket's.
func (gp *gpart) position() int64 {
	if gp.holding {
		return gp.Committed
	}
	if gp.loaded {
		return gp.stored.Off
	}
	e, _ := gp.p.view()
	return e
}

// ensureGroup returns the local group, creating it from def. Caller holds gmu.
func (e *Engine) ensureGroup(name string, def groupDef) *group {
	if g := e.groups[name]; g != nil {
		return g
	}
	g := &group{name: name, def: def, local: make(map[string]*groupstate.Member), parts: make(map[partKey]*gpart)}
	e.groups[name] = g
	e.tmu.RLock()
	ts := slices.Collect(maps.Values(e.topics))
	e.tmu.RUnlock()
	for _, t := range ts {
		if g.matches(t.name) {
			e.addTopicToGroup(g, t)
		}
	}
	e.rebalance(g)
	return g
}

// addTopicToGroup gives g a cursor on every partition of t. A cursor with
// no stored position starts at the earliest record (or by time for a time
// start): the node that creates a group stores positions for the topics
// that exist then, so later topics are read from their beginning.
func (e *Engine) addTopicToGroup(g *group, t *topic) {
	if t.deleted.Load() {
		return
	}
	start := engine.Start{Kind: engine.StartEarliest}
	if g.def.From.Kind == engine.StartTime {
		start = g.def.From
	}
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		if old := g.parts[key]; old != nil {
			if old.t == t {
				continue
			}
			e.removeTopicFromGroup(g, old.t)
		}
		gp := &gpart{g: g, t: t, p: p, key: commitKey(g.name, t, p.index), start: start}
		g.parts[key] = gp
		p.gparts = append(p.gparts, gp)
		e.track(gp)
		e.updateFloor(p)
	}
}

func (e *Engine) removeTopicFromGroup(g *group, t *topic) bool {
	removed := false
	for _, p := range t.parts {
		key := partKey{t.name, p.index}
		gp := g.parts[key]
		if gp == nil || gp.t != t {
			continue
		}
		gp.dropWindow()
		gp.removed = true
		gp.holding = false
		delete(g.parts, key)
		delete(e.dirty, gp)
		p.gparts = slices.DeleteFunc(p.gparts, func(x *gpart) bool { return x == gp })
		e.track(gp)
		e.updateFloor(p)
		removed = true
	}
	return removed
}

// track lists gp in its partition's pumped and reading cursors, or takes
// it off, as its state now says. Both lists are copied on write, so a
// loop over one stays valid while pump changes it. Caller holds gmu.
func (e *Engine) track(gp *gpart) {
	p := gp.p
	if want := !gp.removed && (gp.member != nil || gp.holding) && !gp.parked; want != gp.pumped {
		gp.pumped = want
		p.pumped = relist(p.pumped, gp, want)
		p.npumped.Store(int32(len(p.pumped)))
	}
	if want := !gp.removed && !e.idleGroup(gp.g); want != gp.reading {
		gp.reading = want
		p.reading = relist(p.reading, gp, want)
	}
}

// relist returns a copy of list with gp added (on) or removed.
func relist(list []*gpart, gp *gpart, on bool) []*gpart {
	if on {
		return append(slices.Clip(list), gp)
	}
	return slices.DeleteFunc(slices.Clone(list), func(x *gpart) bool { return x == gp })
}

// updateFloor publishes the lowest position of p's groups with a member
// (a group with none holds nothing back) to the block policy, waking
// blocked appenders when there may be room. Caller holds gmu.
func (e *Engine) updateFloor(p *partition) {
	floor := int64(math.MaxInt64)
	readers := len(p.reading)
	for _, gp := range p.reading {
		floor = min(floor, gp.position())
	}
	p.smu.Lock()
	wake := readers < p.readers || floor > p.floor
	p.readers, p.floor = readers, floor
	if wake && p.waiters > 0 {
		close(p.space)
		p.space = make(chan struct{})
	}
	p.smu.Unlock()
}

// rebalance assigns g's partitions, sorted by (topic, partition),
// round-robin over the registered members sorted by ID: every node computes
// the same assignment from the same registry, and delivers only what falls
// to its own members. Caller holds gmu.
func (e *Engine) rebalance(g *group) {
	g.order = slices.AppendSeq(g.order[:0], maps.Values(g.parts))
	slices.SortFunc(g.order, func(a, b *gpart) int {
		return cmp.Or(strings.Compare(a.t.name, b.t.name), cmp.Compare(a.p.index, b.p.index))
	})
	ids := slices.Sorted(maps.Keys(e.reg[g.name]))
	for i, gp := range g.order {
		gp.owner, gp.member = "", nil
		if len(ids) > 0 {
			gp.owner = ids[i%len(ids)]
			gp.member = g.local[gp.owner]
		}
	}
	for _, gp := range g.order {
		e.track(gp)
		e.updateFloor(gp.p)
		e.pump(gp)
	}
	e.armIdle(g)
}

func (e *Engine) markDirty(gp *gpart) {
	e.dirty[gp] = struct{}{}
	select {
	case e.kick <- struct{}{}:
	default:
	}
}
