package client

// Reconnecting: when the connection is lost the client fails the requests
// sent on it, dials again with backoff, and resumes every subscription
// from the positions it has delivered (lost, redial, resume).

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/coder/websocket"
)

// lost forgets conn and fails the requests sent on it. It reports whether
// the client has stopped.
func (c *Client) lost(conn *websocket.Conn, cause error) bool {
	conn.CloseNow()
	c.mu.Lock()
	var calls []*call
	if c.conn == conn {
		c.conn = nil
		if c.stopped == nil {
			c.ready = make(chan struct{})
		}
	}
	for id, cl := range c.pending {
		if cl.conn == conn {
			calls = append(calls, cl)
			delete(c.pending, id)
			c.replied(cl)
		}
	}
	stopped := c.stopped
	c.mu.Unlock()
	err := fmt.Errorf("%w: %v", ErrConnectionLost, cause)
	if stopped != nil {
		err = stopped
	}
	for _, cl := range calls {
		cl.finish(nil, err)
	}
	if stopped != nil || c.ctx.Err() != nil {
		return true
	}
	c.log.Info("switchyard: connection lost", "err", cause)
	c.disp.push(event{kind: evState, state: StateDisconnected, err: cause})
	return false
}

// redial connects again with backoff and resubscribes; nil means the client
// was closed meanwhile.
func (c *Client) redial() *websocket.Conn {
	p := c.opts.Reconnect
	delay := p.MinDelay
	for attempt := 1; ; attempt++ {
		d := delay
		if p.Jitter > 0 {
			d -= time.Duration(rand.Float64() * p.Jitter * float64(d))
		}
		t := time.NewTimer(d)
		select {
		case <-c.ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		conn, w, err := c.connect(c.ctx)
		if err == nil {
			c.resume(conn, w)
			return conn
		}
		if c.ctx.Err() != nil {
			return nil
		}
		c.log.Info("switchyard: redial failed", "attempt", attempt, "err", err)
		delay = min(2*delay, p.MaxDelay)
	}
}

// resume installs a new connection and resends every active subscription.
// It runs on the reader goroutine before the connection is read, so the
// replies' callbacks run in order with the deliveries that follow them.
func (c *Client) resume(conn *websocket.Conn, w Welcome) {
	type resub struct {
		s   *Subscription
		req subscribeReq
	}
	var list []resub
	c.mu.Lock()
	if c.stopped != nil {
		// Close ran while dialing.
		c.mu.Unlock()
		conn.CloseNow()
		return
	}
	c.conn, c.welcome = conn, w
	close(c.ready)
	for _, s := range c.subs {
		if !s.isActive() {
			continue
		}
		id := c.nextID.Add(1)
		s.forgetBases() // the gateway starts again with full messages
		s.newConnection()
		req := s.request(id, true, w.Epoch)
		c.pending[id] = &call{conn: conn, fn: func(f *inFrame, err error) { c.resubscribed(s, f, err) }}
		list = append(list, resub{s, req})
	}
	c.mu.Unlock()
	for _, r := range list {
		b, _ := json.Marshal(r.req) // only strings, maps of strings and numbers
		if err := conn.Write(c.ctx, websocket.MessageText, b); err != nil {
			break // the reader sees the broken connection and starts over
		}
	}
	c.log.Info("switchyard: reconnected", "session", w.Session, "subscriptions", len(list))
	c.disp.push(event{kind: evState, state: StateConnected})
}

// resubscribed handles the reply to a resubscription.
func (c *Client) resubscribed(s *Subscription, f *inFrame, err error) {
	var e *Error
	switch {
	case errors.As(err, &e):
		c.removeSub(s)
		c.disp.push(event{kind: evError, err: fmt.Errorf("client: resubscribing %q: %w", s.pattern, err)})
	case err != nil:
		// The connection dropped again; the next one retries.
	default:
		if reset, epochChanged := s.resumed(f.Recovered); reset {
			c.disp.push(event{kind: evReset, sub: s, reset: &Reset{Pattern: s.pattern, Group: s.group, EpochChanged: epochChanged}})
		}
	}
}

// removeSub forgets s and ends it.
func (c *Client) removeSub(s *Subscription) {
	c.mu.Lock()
	k := subKey{s.pattern, s.group}
	if c.subs[k] == s {
		delete(c.subs, k)
	}
	c.mu.Unlock()
	if s.end() {
		c.disp.push(event{kind: evEnd, sub: s})
	}
}
