package router

// Graceful shutdown of group members. Before any session queue closes,
// every group member of this node, push and pull, is handed back to the
// engine in one engine.HandBack call, so no record is delivered to another
// member of this node that is about to close. With a shared store
// (JetStream) members on other nodes take the partitions; otherwise the
// records stay owed to the group.
//
// A delivery that never reached the wire is not an attempt: each group
// delivery carries a Ref that the session's writer reports once written
// (Router.onSent), so the router knows, per member, which leased records
// are still queued; those, and a pull member's buffered records, are
// handed back as unsent, and so are an MQTT member's deliveries held for
// room in its client's window (mqtt_group.go), and the deliveries made to
// a member after its held or buffered ones were read (MemberRef.Later).
// A record still queued at that moment may be flushed to its client while
// the session closes; its attempt was not counted, so at worst a client
// sees a record once more than its attempt number says, never fewer.

import (
	"context"
	"errors"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// handBackTimeout bounds the hand-back when the Shutdown context has no
// deadline of its own.
const handBackTimeout = 5 * time.Second

// handBack hands every group member of conns and every pull member back to
// the engine in one step.
func (rt *Router) handBack(ctx context.Context, conns []*conn) {
	var refs []engine.MemberRef
	var subs []*subscription
	for _, cn := range conns {
		cn.mu.Lock()
		for _, s := range cn.byID {
			if s.group != "" && s.member != "" {
				subs = append(subs, s)
			}
		}
		cn.mu.Unlock()
	}
	rt.mu.Lock()
	for g, pm := range rt.pulls {
		pm.mu.Lock()
		pm.left = true
		var unsent []engine.Position // buffered, never polled
		for _, d := range pm.buf {
			unsent = append(unsent, engine.Position{Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset})
		}
		pm.buf = nil
		pm.mu.Unlock()
		// One delivered from here on is not buffered (left) but listed
		// for the engine to read inside HandBack (takeLate).
		refs = append(refs, engine.MemberRef{Group: g, Member: pm.member, Unsent: unsent, Later: pm.takeLate})
		delete(rt.pulls, g)
		rt.unreservePullLocked(pm.client)
	}
	rt.mu.Unlock()
	if len(refs) == 0 && len(subs) == 0 {
		return
	}
	for _, s := range subs {
		s.handedBack.Store(true)
		var unsent []engine.Position
		var later func() []engine.Position
		if s.c != nil && s.c.mqtt != nil {
			// Held for room in the client's window (mqtt_group.go): read
			// first, as one being written leaves them once queued. One
			// delivered from here on is not held (handedBack) but listed
			// for the engine to read inside HandBack (takeLateFor), after
			// its last delivery to the member.
			unsent = s.c.mqtt.takeHeldFor(s)
			mq, sub := s.c.mqtt, s
			later = func() []engine.Position { return mq.takeLateFor(sub) }
		}
		refs = append(refs, engine.MemberRef{Group: s.group, Member: s.member,
			Unsent: append(unsent, s.unsentPositions()...), Later: later})
	}
	hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), handBackTimeout)
	defer cancel()
	if err := rt.eng.HandBack(hctx, refs); err != nil && !errors.Is(err, engine.ErrClosed) {
		rt.log.Warn("handing group members back failed", "members", len(refs), "err", err)
	}
}
