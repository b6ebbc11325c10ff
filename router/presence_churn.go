package router

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/switchyard/switchyard/session"
)

// Presence churn: what one session's joins and leaves may cost others.
//
// A join or leave is announced to every member of its topic as a control
// item, which the session queue never drops. Two bounds keep a churning
// session from closing the others:
//
//   - Per member, announcements are queued only while the member's control
//     queue holds less than PresenceOptions.QueueBytes (and fewer than
//     twice Session.QueueMessages items of all kinds). Past it they are
//     dropped (switchyard_presence_announcements_dropped_total) and the
//     member is stale: it gets no announcement until, its queue drained to
//     half that bound, it is sent one resync frame,
//     {"op":"presence","topic":…,"resync":true}, and announcements resume
//     after it (switchyard_presence_resyncs_total). The client then lists
//     the members again with the presence op. A member is never closed
//     for announcements: QueueBytes is at most half of
//     Session.ControlBytes.
//   - Per session, presence joins (subscribes with presence) are limited
//     to PresenceOptions.JoinRate per second, burst JoinBurst; a subscribe
//     past it is refused with rate_limited (switchyard_limit_rejections_total
//     {limit="presence_join_rate"}). Leaves follow joins, so a session's
//     churn costs each member at most twice its join rate in frames.
//
// A member's session may still end by the bounds of every session (the
// write timeout and the keepalive, without a close frame); each member's
// end is counted by its reason (switchyard_presence_member_sessions_ended_total,
// memberEnded) and an end by a bound is logged, so that a member dropped
// without a close frame can be told apart from one the client closed.
//
// The presence op answers a member in order with its announcements: while
// it lists, the member's announcements wait (at most presenceHeldFrames)
// and are queued after the reply, so every join and leave after the reply
// applies to the list it carries.
//
// Lock order: presenceMember.mu, then presenceHub.mu, then the session's
// queue (Send, Stats). presenceHub.mu is never held while taking a
// member's mu.

// PresenceOptions bound what presence announcements cost. The zero value
// of each field selects its default.
type PresenceOptions struct {
	// JoinRate bounds one session's presence joins per second; a
	// subscribe with presence past it is refused with rate_limited.
	// Default 10 (DefaultPresenceJoinRate); negative: unlimited.
	JoinRate float64
	// JoinBurst is the presence joins a session may make at once.
	// Default 100 (DefaultPresenceJoinBurst).
	JoinBurst int
	// QueueBytes bounds the control bytes a member may have queued for an
	// announcement to join them; past it announcements are dropped and
	// the member is sent a resync frame later. Default 64 KiB
	// (DefaultPresenceQueueBytes); at most half of Session.ControlBytes.
	QueueBytes int
}

// Defaults of PresenceOptions.
const (
	// DefaultPresenceJoinRate: a client joins its rooms once and then
	// moves between a few a second at most; ten joins a second cost each
	// member twenty frames a second of one session's churn.
	DefaultPresenceJoinRate = 10
	// DefaultPresenceJoinBurst lets a reconnecting client resubscribe a
	// hundred presence topics at once.
	DefaultPresenceJoinBurst = 100
	// DefaultPresenceQueueBytes is some 500 announcements of ordinary
	// size: a burst a reading client absorbs, a sixteenth of the default
	// control queue.
	DefaultPresenceQueueBytes = 64 << 10
)

// limitPresenceJoinRate labels switchyard_limit_rejections_total.
const limitPresenceJoinRate = "presence_join_rate"

const (
	// presenceResyncPoll is how often stale members are checked for a
	// drained queue.
	presenceResyncPoll = 50 * time.Millisecond
	// presenceHeldFrames bounds the announcements a member's presence op
	// holds back while it lists; past it the member goes stale.
	presenceHeldFrames = 1024
	// presenceJoinPurge is the size of the join-limiter map past which
	// limiters with a full bucket (no state worth keeping) are dropped.
	presenceJoinPurge = 1024
)

// presenceMember is one local presence subscription and the state of its
// announcements.
type presenceMember struct {
	s *subscription

	mu      sync.Mutex // guards the fields below
	stale   bool       // announcements are dropped until the resync frame
	listing int        // presence ops of the member in progress
	held    [][]byte   // announcements waiting for a listing's reply
	ended   bool
}

// presenceChurn is the presence hub's state for the bounds above.
type presenceChurn struct {
	queueBytes int
	queueItems int
	joinRate   rate.Limit
	joinBurst  int

	dropped prometheus.Counter
	resyncs prometheus.Counter
	ends    *prometheus.CounterVec // presence members whose session ended, by reason (presenceEndReason)

	done chan struct{}  // closed by closeChurn
	wg   sync.WaitGroup // the sweeper

	// Guarded by presenceHub.mu:
	stale    map[*presenceMember]struct{}
	sweeping bool
	closed   bool
	joins    map[*conn]*rate.Limiter
	purgeAt  int
}

// initChurn sets h's bounds from rt's options and registers its metrics.
func (h *presenceHub) initChurn(rt *Router) {
	o := rt.opts.Presence
	c := &h.presenceChurn
	*c = presenceChurn{
		queueBytes: o.QueueBytes,
		queueItems: 2 * rt.opts.Session.QueueMessages,
		joinRate:   rate.Limit(o.JoinRate),
		joinBurst:  o.JoinBurst,
		done:       make(chan struct{}),
		stale:      map[*presenceMember]struct{}{},
		joins:      map[*conn]*rate.Limiter{},
		purgeAt:    presenceJoinPurge,
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "switchyard", Name: "presence_announcements_dropped_total",
			Help: "Presence join and leave frames not queued to a member whose control queue held its presence share; the member is sent a resync frame."}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "switchyard", Name: "presence_resyncs_total",
			Help: "Presence resync frames sent to members whose announcements were dropped."}),
		ends: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "switchyard", Name: "presence_member_sessions_ended_total",
			Help: "Presence members whose session ended, by reason: peer (the client or the network), closed (the gateway, with a close frame), or the bound that ended it without one (write_timeout, keepalive) or with one (slow_consumer, control_overflow, message_timeout)."},
			[]string{"reason"}),
	}
	if c.queueBytes <= 0 {
		c.queueBytes = DefaultPresenceQueueBytes
	}
	c.queueBytes = min(c.queueBytes, rt.opts.Session.ControlBytes/2)
	switch {
	case o.JoinRate == 0:
		c.joinRate = DefaultPresenceJoinRate
	case o.JoinRate < 0:
		c.joinRate = rate.Inf
	}
	if c.joinBurst <= 0 {
		c.joinBurst = DefaultPresenceJoinBurst
	}
	rt.opts.Registry.MustRegister(c.dropped, c.resyncs, c.ends)
	for _, r := range presenceEndReasons {
		c.ends.WithLabelValues(r)
	}
	rt.lim.limited.WithLabelValues(limitPresenceJoinRate)
}

// allowJoin takes one join from cn's bucket.
func (h *presenceHub) allowJoin(cn *conn) bool {
	if h.joinRate == rate.Inf {
		return true
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	l := h.joins[cn]
	if l == nil {
		if len(h.joins) >= h.purgeAt {
			now := time.Now()
			for c, l := range h.joins {
				if l.TokensAt(now) >= float64(h.joinBurst) {
					delete(h.joins, c)
				}
			}
			h.purgeAt = max(presenceJoinPurge, 2*len(h.joins))
		}
		l = rate.NewLimiter(h.joinRate, h.joinBurst)
		h.joins[cn] = l
	}
	return l.Allow()
}

// forgetJoins drops cn's join limiter (the session ended).
func (h *presenceHub) forgetJoins(cn *conn) {
	h.mu.Lock()
	delete(h.joins, cn)
	h.mu.Unlock()
}

// fits reports whether a frame of n bytes may join sess's queue.
func (h *presenceHub) fits(sess *session.Session, n int) bool {
	st := sess.Stats()
	return st.Queued < h.queueItems && (st.ControlBytes == 0 || st.ControlBytes+n <= h.queueBytes)
}

// announce queues frame to pm, holds it for a listing in progress, or
// drops it (pm is or goes stale).
func (h *presenceHub) announce(pm *presenceMember, frame []byte) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	switch {
	case pm.ended:
	case pm.listing > 0 && !pm.stale:
		if len(pm.held) < presenceHeldFrames {
			pm.held = append(pm.held, frame)
			return
		}
		pm.held = nil
		h.goStale(pm)
	case pm.stale:
		h.dropped.Inc()
	case !h.fits(pm.s.c.sess, len(frame)):
		h.goStale(pm)
	default:
		pm.s.c.sess.Send(session.Item{Frame: frame})
	}
}

// goStale drops an announcement and marks pm stale, for the sweeper to
// send it a resync frame; pm.mu is held.
func (h *presenceHub) goStale(pm *presenceMember) {
	h.dropped.Inc()
	pm.stale = true
	h.mu.Lock()
	defer h.mu.Unlock()
	h.stale[pm] = struct{}{}
	if h.sweeping || h.closed {
		return
	}
	h.sweeping = true
	h.wg.Add(1)
	go h.sweep()
}

// sweep sends stale members their resync frame once their queues have
// drained. It runs while any member is stale and exits when none is or
// close is called.
func (h *presenceHub) sweep() {
	defer h.wg.Done()
	t := time.NewTicker(presenceResyncPoll)
	defer t.Stop()
	for {
		select {
		case <-h.done:
			return
		case <-t.C:
		}
		h.mu.Lock()
		if len(h.stale) == 0 {
			h.sweeping = false
			h.mu.Unlock()
			return
		}
		list := make([]*presenceMember, 0, len(h.stale))
		for pm := range h.stale {
			list = append(list, pm)
		}
		h.mu.Unlock()
		for _, pm := range list {
			h.resync(pm)
		}
	}
}

// resync sends pm its resync frame if its queue has drained to half the
// bound (or forgets it, ended).
func (h *presenceHub) resync(pm *presenceMember) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	if !pm.ended && pm.stale {
		if st := pm.s.c.sess.Stats(); st.ControlBytes > h.queueBytes/2 || st.Queued >= h.queueItems/2 {
			return
		}
		pm.s.c.sess.Send(session.Item{Frame: encodeResync(pm.s.pattern)})
		h.resyncs.Inc()
		pm.stale = false
	}
	h.mu.Lock()
	delete(h.stale, pm)
	h.mu.Unlock()
}

// encodeResync encodes {"op":"presence","topic":…,"resync":true}.
func encodeResync(topic string) []byte {
	dst := make([]byte, 0, 48+len(topic))
	dst = append(dst, `{"op":"presence","topic":`...)
	dst = appendString(dst, topic)
	return append(dst, `,"resync":true}`...)
}

// endMember marks pm ended: nothing more is queued to it.
func (h *presenceHub) endMember(pm *presenceMember) {
	pm.mu.Lock()
	pm.ended = true
	pm.held = nil
	pm.mu.Unlock()
	h.mu.Lock()
	delete(h.stale, pm)
	h.mu.Unlock()
}

// beginListing holds pm's announcements back until endListing.
func (pm *presenceMember) beginListing() {
	pm.mu.Lock()
	pm.listing++
	pm.mu.Unlock()
}

// endListing queues reply (nil: none), then the announcements held while
// listing, as far as they fit.
func (h *presenceHub) endListing(pm *presenceMember, reply []byte) {
	pm.mu.Lock()
	defer pm.mu.Unlock()
	pm.listing--
	sess := pm.s.c.sess
	if reply != nil {
		sess.Send(session.Item{Frame: reply})
	}
	if pm.listing > 0 || pm.ended {
		return
	}
	held := pm.held
	pm.held = nil
	if pm.stale {
		h.dropped.Add(float64(len(held)))
		return
	}
	for i, f := range held {
		if !h.fits(sess, len(f)) {
			h.goStale(pm)
			h.dropped.Add(float64(len(held) - i - 1))
			return
		}
		sess.Send(session.Item{Frame: f})
	}
}

// closeChurn stops the sweeper and waits for it.
func (h *presenceHub) closeChurn() {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return
	}
	h.closed = true
	close(h.done)
	h.mu.Unlock()
	h.wg.Wait()
}

// presenceEndReasons label switchyard_presence_member_sessions_ended_total.
var presenceEndReasons = []string{"peer", "closed", "write_timeout", "keepalive", "slow_consumer", "control_overflow", "message_timeout"}

// presenceEndReason names why a presence member's session ended, from
// session.Session.Cause: the gateway's own reasons first, then a Close of
// the gateway (nil), then whatever the peer or the network did.
func presenceEndReason(cause error) string {
	switch {
	case errors.Is(cause, session.ErrWriteTimeout):
		return "write_timeout"
	case errors.Is(cause, session.ErrKeepalive):
		return "keepalive"
	case errors.Is(cause, session.ErrSlowConsumer):
		return "slow_consumer"
	case errors.Is(cause, session.ErrControlOverflow):
		return "control_overflow"
	case errors.Is(cause, session.ErrMessageTimeout):
		return "message_timeout"
	case cause == nil:
		return "closed"
	}
	return "peer"
}

// memberEnded counts the end of a presence member's session and logs it
// when the gateway ended it for a bound: a member is never closed for
// announcements (see above), so such an end names what did.
func (h *presenceHub) memberEnded(log *slog.Logger, s *subscription) {
	select {
	case <-s.c.sess.Done():
	default:
		return // still running: not an end
	}
	cause := s.c.sess.Cause()
	r := presenceEndReason(cause)
	h.ends.WithLabelValues(r).Inc()
	if r != "peer" && r != "closed" {
		st := s.c.sess.Stats()
		log.Info("presence member's session ended by a bound", "session", s.c.id, "topic", s.pattern, "reason", r, "err", cause,
			"queued", st.Queued, "control_bytes", st.ControlBytes, "bytes_out", st.BytesOut)
	}
}
