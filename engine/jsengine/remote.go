package jsengine

// Acks on any node. Leases live on the node holding a partition (its
// flights, ack timers and backoffs are local state); an Ack or Nack that
// reaches another node, as a poll and its ack behind a load balancer do,
// is forwarded to the holder: every node serves requests on its own
// subject <prefix>.settle.<node>, and a node that does not hold the
// partition sends the settle there, naming the holder it sees in the
// group bucket, and returns the holder's answer.
//
// A node whose watcher has not yet brought the holder's claim (or names a
// holder that has let go) reads the position from the bucket and forwards
// to the holder stored there (engine.ErrNotInFlight when the holder is
// gone: its leases ended with it, and the next holder redelivers). The
// holder checks the member named as for a local settle: a member family
// (engine.MembersOf, as the router's HTTP pull members use) matches a
// lease held by any member of the family on the holder.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
)

// settleReq is an Ack (Nack false) or Nack forwarded to the holder.
type settleReq struct {
	Nack      bool   `json:"nack,omitempty"`
	Group     string `json:"g"`
	Member    string `json:"m"`
	Topic     string `json:"t"`
	Partition int    `json:"p"`
	Offset    int64  `json:"o"`
	Reason    string `json:"r,omitempty"`
}

// settleResp is the holder's answer: Code names the sentinel error, Msg
// describes it; both empty on success.
type settleResp struct {
	Code string `json:"c,omitempty"`
	Msg  string `json:"m,omitempty"`
}

// Codes of settleResp.Code, one per sentinel a settle can fail with.
var settleCodes = map[string]error{
	"not_in_flight":  engine.ErrNotInFlight,
	"unknown_group":  engine.ErrUnknownGroup,
	"unknown_member": engine.ErrUnknownMember,
	"closed":         engine.ErrClosed,
	"unavailable":    engine.ErrUnavailable,
}

func (e *Engine) settleSubject(node string) string { return e.prefix + ".settle." + node }

// subscribeSettle starts serving settles forwarded to this node. The
// subscription's callback runs on a goroutine of the NATS client, which
// shutdown ends by unsubscribing.
func (e *Engine) subscribeSettle() error {
	sub, err := e.nc.Subscribe(e.settleSubject(e.node), e.settleMsg)
	if err != nil {
		return unavailable("settle subscription", err)
	}
	e.settleSub = sub
	return nil
}

// settleMsg serves one forwarded settle, on this node only (never
// forwarded again).
func (e *Engine) settleMsg(msg *nats.Msg) {
	var req settleReq
	var err error
	if json.Unmarshal(msg.Data, &req) != nil {
		err = fmt.Errorf("jsengine: bad settle request: %w", engine.ErrInvalidConfig)
	} else if e.closed.Load() {
		err = closedErr()
	} else {
		pos := engine.Position{Topic: req.Topic, Partition: req.Partition, Offset: req.Offset}
		_, _, err = e.settleLocal(req.Nack, req.Group, req.Member, pos, req.Reason)
	}
	var resp settleResp
	if err != nil {
		resp.Msg = err.Error()
		for code, sentinel := range settleCodes {
			if errors.Is(err, sentinel) {
				resp.Code = code
			}
		}
	}
	b, _ := json.Marshal(resp)
	_ = msg.Respond(b)
}

// settle acks (nack false) or nacks a delivery: on this node when it
// holds the partition, else on the holder. This node's view of the group
// bucket comes from its watcher and may lag: the holder writes its claim
// and the attempt before the delivery, but the member's ack, sent to this
// node, can arrive before the watcher brings them (a poll on one node and
// its ack on another). So when the view names no other holder, or the one
// it names no longer has the record in flight, settle reads the position
// from the bucket and forwards to the holder stored there
// (TestAckThroughLaggingNode).
func (e *Engine) settle(ctx context.Context, nack bool, group, member string, pos engine.Position, reason string) error {
	holder, remote, err := e.settleLocal(nack, group, member, pos, reason)
	if !remote {
		return err
	}
	req := settleReq{
		Nack: nack, Group: group, Member: member,
		Topic: pos.Topic, Partition: pos.Partition, Offset: pos.Offset, Reason: reason,
	}
	if holder != "" {
		if err = e.settleRemote(ctx, holder, req); !errors.Is(err, engine.ErrNotInFlight) {
			return err
		}
	}
	stored := e.storedHolder(ctx, group, pos)
	if stored == "" || stored == holder {
		return err
	}
	return e.settleRemote(ctx, stored, req)
}

// settleLocal settles a delivery this node holds. When this node does not
// hold the partition it reports remote instead, with the holder its view
// names ("" when none) and ErrNotInFlight (or ErrUnknownGroup).
func (e *Engine) settleLocal(nack bool, group, member string, pos engine.Position, reason string) (holder string, remote bool, _ error) {
	e.gmu.Lock()
	defer e.gmu.Unlock()
	gp, f, err := e.inFlight(group, member, pos)
	if err != nil {
		if g := e.groups[group]; g != nil {
			o := g.parts[partKey{pos.Topic, pos.Partition}]
			if o != nil && o.holding {
				return "", false, err // ours, and not in flight
			}
			if o != nil && o.loaded && o.stored.Holder != e.node {
				holder = o.stored.Holder
			}
		}
		return holder, true, err
	}
	if nack {
		e.flights.Fail(gp, f, reason, true)
	} else {
		f.Ack()
	}
	e.pump(gp)
	return "", false, nil
}

// storedHolder reads pos's partition position from the group bucket and
// returns the holder it names: "" when none, this node, or the topic or
// position cannot be read.
func (e *Engine) storedHolder(ctx context.Context, group string, pos engine.Position) string {
	if e.reachable() != nil {
		return ""
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	ctx, done := e.onConn(ctx)
	defer done(nil)
	t, err := e.lookup(ctx, pos.Topic)
	if err != nil || pos.Partition < 0 || pos.Partition >= len(t.parts) {
		return ""
	}
	ent, err := e.groupKV.Get(ctx, commitKey(group, t, pos.Partition))
	if err != nil {
		return ""
	}
	var v commitVal
	if json.Unmarshal(ent.Value(), &v) != nil || v.Holder == e.node {
		return ""
	}
	return v.Holder
}

// settleRemote sends a settle to the holder and returns its answer. A
// holder that is gone had its leases end with it: ErrNotInFlight.
func (e *Engine) settleRemote(ctx context.Context, holder string, req settleReq) (err error) {
	if err := e.reachable(); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	ctx, done := e.onConn(ctx)
	defer func() { err = done(err) }()
	b, _ := json.Marshal(req)
	msg, err := e.nc.RequestWithContext(ctx, e.settleSubject(holder), b)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("jsengine: group %q %s/%d@%d: holder %s is gone: %w",
			req.Group, req.Topic, req.Partition, req.Offset, holder, engine.ErrNotInFlight)
	case err != nil:
		return unavailable("settle on "+holder, err)
	}
	var resp settleResp
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return fmt.Errorf("jsengine: settle on %s: bad answer: %w", holder, err)
	}
	if resp.Code == "" && resp.Msg == "" {
		return nil
	}
	if sentinel := settleCodes[resp.Code]; sentinel != nil {
		return fmt.Errorf("jsengine: on holder %s: %s: %w", holder, resp.Msg, sentinel)
	}
	return fmt.Errorf("jsengine: on holder %s: %s", holder, resp.Msg)
}
