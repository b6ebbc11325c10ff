package router

// A catch-up's failed read of the log (subscription.catchUp).
//
// A read that fails unavailable (the engine's connection lost, a request
// that went unanswered) is read again from where it stopped, after a
// pause that doubles from replayRetryMin to replayRetryCap, until it
// succeeds, the session ends or replayRetryMax has passed since its first
// failure: an outage of the engine's link costs the subscription a delay,
// not its records. Past the bound, or on any other error, the
// subscription ends and the client is told: a native session gets
// {"op":"unsubscribed","pattern","group"?,"reason":"unavailable"} (it
// may subscribe again, from where it got to), an MQTT session is ended
// with DISCONNECT 0x89 (server busy; 3.1.1: a close), so the client
// connects again and its session resumes from its positions. A catch-up
// that failed used to stay catching up for good, silently: its client
// had "subscribed" and nothing more.

import (
	"context"
	"errors"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/session"
)

// Bounds of a catch-up's retries of an unavailable read.
const (
	replayRetryMin = 50 * time.Millisecond
	replayRetryCap = time.Second
)

// replayRetryMax bounds how long a catch-up retries: about what a NATS
// leader election or a reconnect takes, several times over. A variable
// for tests.
var replayRetryMax = 30 * time.Second

// retrying calls read until it succeeds or fails with an error other than
// unavailable, ctx ends, or replayRetryMax has passed since its first
// failure, pausing between calls; it returns read's last error.
func (s *subscription) retrying(ctx context.Context, read func() error) error {
	var first time.Time
	pause := replayRetryMin
	for {
		err := read()
		if err == nil || !s.retryable(ctx, err) {
			return err
		}
		if first.IsZero() {
			first = time.Now()
		} else if time.Since(first) >= replayRetryMax {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, replayRetryCap)
	}
}

// retryable reports whether a catch-up's error is the engine's being
// unavailable while the subscription and its session go on.
func (s *subscription) retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil || !errors.Is(err, engine.ErrUnavailable) || errors.Is(err, errEnded) || errors.Is(err, session.ErrClosed) {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.ended
}

// replayFailed ends a subscription whose catch-up failed, telling the
// client, unless the subscription or its session ended first.
func (s *subscription) replayFailed(ctx context.Context, topic string, err error) {
	if ctx.Err() != nil || errors.Is(err, errEnded) || errors.Is(err, session.ErrClosed) {
		return
	}
	cn := s.c
	cn.rt.log.Warn("replay failed; subscription ended", "pattern", s.pattern, "topic", topic, "err", err)
	if cn.kind == transportMQTT {
		cn.mqtt.end(rcServerBusy, "replay failed: "+err.Error())
		return
	}
	cn.mu.Lock()
	held := cn.removeLocked(s)
	cn.mu.Unlock()
	cn.rt.dropSub(s)
	if !held {
		return // unsubscribed meanwhile: the client was answered
	}
	fields := map[string]any{"pattern": s.pattern, "reason": codeUnavailable}
	if s.group != "" {
		fields["group"] = s.group
	}
	cn.sess.Send(session.Item{Frame: encodeReply("unsubscribed", nil, fields)})
}
