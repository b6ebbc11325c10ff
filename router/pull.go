package router

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// pullIdle is how long a pull member lives without a poll before it leaves
// its group (handing its unacked records back).
const pullIdle = time.Minute

// pullWindow is the window per partition of a group that a poll creates: a
// poll of a one-partition topic returns up to this many records. A group
// created by a WebSocket subscribe keeps its own max_in_flight.
const pullWindow = 100

// pullLeased bounds the records a pull member holds leased at once (and so
// its buffer): the largest poll.
const pullLeased = 1000

// pullLeasedBytes bounds likewise the bytes of the records a pull member
// holds leased (engine.JoinRequest.MaxLeasedBytes): with
// GroupBounds.MaxPullMembers it bounds what pull members hold.
const pullLeasedBytes = 4 << 20

// pullPrefix begins the member ID of every pull member, on every node: an
// HTTP ack or nack settles a record leased to any pull member of the group
// (engine.MembersOf), wherever it was polled.
const pullPrefix = "pull-"

// pullMember is a group member driven by HTTP polls instead of a session.
// The engine leases each delivery for the ack timeout as for push members;
// the lease starts when the record reaches the member's buffer.
type pullMember struct {
	group, pattern, member string
	client                 string        // clientOf the poll that made it
	wake                   chan struct{} // capacity 1: "something arrived"

	mu       sync.Mutex // guards the fields below
	buf      []engine.Delivery
	lastPoll time.Time
	left     bool
	// late: deliveries made once the member left (no poll comes for
	// them), their positions listed for a graceful shutdown's hand-back
	// to give back as unsent (takeLate); at most its leases.
	late []engine.Position
}

// Deliver implements engine.Consumer. A delivery made once the member
// left (a graceful shutdown read its buffer, and the engine has not yet
// taken it back) is listed as late, not buffered.
func (p *pullMember) Deliver(d engine.Delivery) {
	p.mu.Lock()
	if p.left {
		p.late = append(p.late, deliveryPos(d))
		p.mu.Unlock()
		return
	}
	p.buf = append(p.buf, d)
	p.mu.Unlock()
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Skipped implements engine.Consumer; a poller learns of trimmed records
// from the group's skipped count in GET /v1/groups/{group}.
func (p *pullMember) Skipped(string, string, int, int64, int64) {}

// takeLate takes the deliveries made once the member left; the engine's
// HandBack reads them (engine.MemberRef.Later) under the lock its
// deliveries are made under, after which none comes.
func (p *pullMember) takeLate() []engine.Position {
	p.mu.Lock()
	defer p.mu.Unlock()
	late := p.late
	p.late = nil
	return late
}

func (p *pullMember) take(n int) []engine.Delivery {
	p.mu.Lock()
	defer p.mu.Unlock()
	n = min(n, len(p.buf))
	out := append([]engine.Delivery(nil), p.buf[:n]...)
	p.buf = append(p.buf[:0], p.buf[n:]...)
	return out
}

// pullMemberFor returns this node's pull member of group, making it (and
// the group, when it is new) for client within the pull-member bounds.
func (rt *Router) pullMemberFor(ctx context.Context, group, pattern, client string) (*pullMember, error) {
	rt.mu.Lock()
	pm := rt.pulls[group]
	if pm == nil {
		if pe := rt.roomForPull(client); pe != nil {
			rt.mu.Unlock()
			return nil, pe
		}
		rt.pullsBy[client]++ // reserved while joining
	}
	rt.mu.Unlock()
	if pm != nil {
		if pm.pattern != pattern {
			return nil, perr(codeGroupConflict, "group %q is fixed to pattern %q", group, pm.pattern)
		}
		return pm, nil
	}
	pm = &pullMember{group: group, pattern: pattern, client: client, member: pullPrefix + newID(), wake: make(chan struct{}, 1), lastPoll: time.Now()}
	req := engine.JoinRequest{Group: group, Pattern: pattern, Member: pm.member, MaxLeased: pullLeased, MaxLeasedBytes: pullLeasedBytes}
	made, unknown := false, false // made: this poll charged the group
	if _, err := rt.eng.Group(ctx, group); errors.Is(err, engine.ErrUnknownGroup) {
		unknown = true
		req.MaxInFlight = pullWindow // a new group: batches
		var pe *protoError
		if made, pe = rt.gm.made.charge(rt.opts.Groups, group, client, groupCost(group, pattern, nil), nil); pe != nil {
			rt.countLimit(pe)
			rt.mu.Lock()
			rt.unreservePullLocked(client)
			rt.mu.Unlock()
			return nil, pe
		}
	}
	if _, err := rt.eng.Join(ctx, req, pm); err != nil {
		if made {
			rt.unmake(group, rt.gm.made.forget(group))
		}
		rt.mu.Lock()
		rt.unreservePullLocked(client)
		rt.mu.Unlock()
		return nil, err
	}
	if unknown { // this join made the group, unless another did first
		rt.gm.made.adopt(group, client, groupCost(group, pattern, nil))
	}
	rt.mu.Lock()
	if other := rt.pulls[group]; other != nil || rt.closing.Load() {
		// Lost a race with another poll (or shutdown): keep one member.
		rt.unreservePullLocked(client)
		rt.mu.Unlock()
		_ = rt.eng.Leave(context.Background(), group, pm.member)
		if other == nil {
			return nil, perr(codeShuttingDown, "server is shutting down")
		}
		return other, nil
	}
	rt.pulls[group] = pm
	rt.mu.Unlock()
	return pm, nil
}

// roomForPull refuses a new pull member past GroupBounds.MaxPullMembers
// or the client's MaxPullMembersPerClient, counting the refusal. Pull
// members being made count (rt.pullsBy holds them), so concurrent polls
// cannot overshoot. Caller holds rt.mu.
func (rt *Router) roomForPull(client string) *protoError {
	b := rt.opts.Groups
	held := 0
	for _, n := range rt.pullsBy {
		held += n
	}
	switch {
	case b.MaxPullMembers > 0 && held >= b.MaxPullMembers:
		rt.lim.limited.WithLabelValues(limitPullMembers).Inc()
		return perr(codeTooManySubs, "the gateway holds its limit of %d pull members (groups polled in the last minute); try again later", b.MaxPullMembers)
	case b.MaxPullMembersPerClient > 0 && rt.pullsBy[client] >= b.MaxPullMembersPerClient:
		rt.lim.limited.WithLabelValues(limitPullMembersPerClient).Inc()
		return perr(codeTooManySubs, "this client holds its limit of %d pull members (groups polled in the last minute); poll fewer groups, or wait for those it no longer polls to leave a minute after their last poll", b.MaxPullMembersPerClient)
	}
	return nil
}

// unreservePullLocked gives back one pull member of client. Caller holds
// rt.mu.
func (rt *Router) unreservePullLocked(client string) {
	if rt.pullsBy[client]--; rt.pullsBy[client] <= 0 {
		delete(rt.pullsBy, client)
	}
}

func (rt *Router) httpPoll(c echo.Context) error {
	var req struct {
		Pattern *string `json:"pattern"`
		Max     int     `json:"max"`
		WaitMS  int     `json:"wait_ms"`
	}
	if err := rt.bind(c, &req); err != nil {
		return err
	}
	group := param(c, "group")
	if pe := validGroup(group); pe != nil {
		return pe
	}
	if req.Pattern == nil {
		return perr(codeBadRequest, `missing field "pattern"`)
	}
	if pe := validPattern(&rt.opts.Bounds, *req.Pattern); pe != nil {
		return pe
	}
	if req.Max == 0 {
		req.Max = 10
	}
	if req.Max < 1 || req.Max > 1000 || req.WaitMS < 0 || req.WaitMS > 30000 {
		return perr(codeBadRequest, "max must be 1 to 1000 and wait_ms 0 to 30000")
	}
	if rt.closing.Load() {
		return perr(codeShuttingDown, "server is shutting down")
	}
	pm, err := rt.pullMemberFor(rt.ctx, group, *req.Pattern, rt.clientOf(c))
	if err != nil {
		return err
	}
	pm.mu.Lock()
	pm.lastPoll = time.Now()
	pm.mu.Unlock()
	got := pm.take(req.Max)
	if len(got) == 0 && req.WaitMS > 0 {
		rt.extendDeadlines(c.Response(), time.Duration(req.WaitMS)*time.Millisecond)
		t := time.NewTimer(time.Duration(req.WaitMS) * time.Millisecond)
		defer t.Stop()
	wait:
		for len(got) == 0 {
			select {
			case <-pm.wake:
				got = pm.take(req.Max)
			case <-t.C:
				break wait
			case <-c.Request().Context().Done():
				break wait
			case <-rt.stopBG:
				break wait
			}
		}
	}
	out := make([]recordJSON, 0, len(got))
	for _, d := range got {
		r := recordView(d.Record)
		r.Group, r.Attempt = d.Group, d.Attempt
		out = append(out, r)
	}
	return c.JSON(http.StatusOK, map[string]any{"records": out})
}

func (rt *Router) httpAck(c echo.Context) error {
	var req struct {
		Topic     *string `json:"topic"`
		Partition *int    `json:"partition"`
		Offset    *int64  `json:"offset"`
		Error     string  `json:"error"`
		Attempt   *int    `json:"attempt"`
	}
	if err := rt.bind(c, &req); err != nil {
		return err
	}
	if req.Topic == nil || req.Partition == nil || req.Offset == nil {
		return perr(codeBadRequest, `"topic", "partition" and "offset" are required`)
	}
	pos := engine.Position{Topic: *req.Topic, Partition: *req.Partition, Offset: *req.Offset}
	group := param(c, "group")
	// Behind a load balancer the poll may have been served by another
	// node, whose pull member holds the lease: settle the record for
	// whichever pull member holds it (the engine reaches its node). A
	// record that went on to a WebSocket member is not_in_flight here.
	member := engine.MembersOf(pullPrefix)
	if req.Attempt != nil {
		// The poll's attempt is the lease: a late settle of an attempt whose
		// lease timed out (and went to another poll) is not_in_flight.
		if *req.Attempt < 1 {
			return perr(codeBadRequest, `"attempt" must be 1 or more`)
		}
		member = engine.LeaseOf(pullPrefix, *req.Attempt)
	}
	var err error
	if strings.HasSuffix(c.Path(), "/nack") {
		err = rt.eng.Nack(c.Request().Context(), group, member, pos, nackReason(req.Error))
	} else {
		err = rt.eng.Ack(c.Request().Context(), group, member, pos)
	}
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"topic": pos.Topic, "partition": pos.Partition, "offset": pos.Offset})
}

// expirePulls makes pull members that stopped polling leave their groups.
func (rt *Router) expirePulls(now time.Time, all bool) {
	var gone []*pullMember
	rt.mu.Lock()
	for g, pm := range rt.pulls {
		pm.mu.Lock()
		idle := now.Sub(pm.lastPoll) > pullIdle
		if all || idle {
			pm.left = true
			gone = append(gone, pm)
			delete(rt.pulls, g)
			rt.unreservePullLocked(pm.client)
		}
		pm.mu.Unlock()
	}
	rt.mu.Unlock()
	for _, pm := range gone {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = rt.eng.Leave(ctx, pm.group, pm.member)
		cancel()
	}
	if !all {
		rt.sweepGroups(now, false) // group_count.go
	}
}

func (rt *Router) stopPulls() { rt.expirePulls(time.Now(), true) }

// httpDeleteGroup deletes a group (admin): its positions go, and this
// node's members of it end with an "unsubscribed" frame of reason
// "group_deleted".
func (rt *Router) httpDeleteGroup(c echo.Context) error {
	group := param(c, "group")
	if err := rt.eng.DeleteGroup(c.Request().Context(), group); err != nil {
		return err
	}
	rt.endGroup(group)
	return c.NoContent(http.StatusNoContent)
}

// endGroup ends this node's subscriptions and pull member of a deleted
// group, which no longer counts against the bounds on groups.
func (rt *Router) endGroup(group string) {
	rt.gm.made.forget(group)
	rt.mu.Lock()
	if pm := rt.pulls[group]; pm != nil {
		pm.mu.Lock()
		pm.left = true
		pm.mu.Unlock()
		delete(rt.pulls, group)
		rt.unreservePullLocked(pm.client)
	}
	conns := make([]*conn, 0, len(rt.conns))
	for cn := range rt.conns {
		conns = append(conns, cn)
	}
	rt.mu.Unlock()
	for _, cn := range conns {
		var ended []*subscription
		cn.mu.Lock()
		for _, s := range cn.byID {
			if s.group == group {
				ended = append(ended, s)
				cn.removeLocked(s)
			}
		}
		cn.mu.Unlock()
		for _, s := range ended {
			rt.dropSub(s)
			cn.sess.Send(session.Item{Frame: encodeReply("unsubscribed", nil, map[string]any{
				"pattern": s.pattern, "group": s.group, "reason": "group_deleted",
			})})
		}
	}
}
