package jsengine

// Availability. Calls that cannot reach NATS fail with an error wrapping
// engine.ErrUnavailable, and fail at once rather than after a timeout:
// while the connection is down they are refused before any round trip
// (reachable; Topics too, so it serves as a readiness probe even with no
// topics), and round trips in progress when it drops are abandoned
// (onConn); a read, a listing (for its set-up and each key after), a
// consumer call whose late landing is harmless or a watcher's set-up
// that goes unanswered while the connection stays up (a link gone
// silent) waits at most roundTripMax, whatever its caller's context
// allows (roundTrip, bounded.go, watch.go), other writes as long as
// their caller allows (one cut short may still land), and one append,
// all its round trips and waits together, is answered within appendMax
// (appendBound). An engine that dials its own connection sets
// MaxReconnects(-1) and ReconnectBufSize(-1): with no reconnect buffer,
// an append refused during an outage is never stored later. Records and
// positions are in NATS, so nothing the engine acknowledged is lost by an
// outage; an append whose reply was lost when the connection dropped may
// have been stored although it failed (a retry with the same MsgID is
// stored once). Records leased to members stay leased across an outage;
// commits that failed are retried.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// connState follows the connection to NATS for the fail-fast and
// watcher-resume rules (see onConn and watchConn).
type connState struct {
	statusCh chan nats.Status // the connection's status changes, for watchConn
	connMu   sync.Mutex       // guards following
	// connCtx is canceled when the connection to NATS is lost and replaced
	// when it is back, so calls in progress fail at once (see onConn).
	connCtx    context.Context
	connCancel context.CancelCauseFunc
	// back is closed (and replaced) when the connection is back after a
	// loss: the watch loops then resume their watchers.
	back chan struct{}
}

// errConnLost is the cause of connCtx's cancellation.
var errConnLost = errors.New("connection to NATS lost")

// watchConn keeps connCtx in step with the connection: canceled when it is
// lost, fresh once it is back. It exits when its status channel is closed.
// A change other than "connected" says the connection was lost (the
// round trips sent on it are cut short even if it is back by now); whether
// it is back is read from the connection itself, not from the changes,
// because the NATS client drops a change when the channel is full (the
// connection flapping faster than this loop reads), and the change dropped
// can be the last "connected". A change made after that read wakes the
// loop again, so it always ends on the status the connection has.
func (e *Engine) watchConn() {
	defer e.wg.Done()
	for change := range e.statusCh {
		up := e.nc.Status() == nats.CONNECTED
		e.connMu.Lock()
		if change != nats.CONNECTED || !up {
			e.connCancel(errConnLost)
		}
		if up && e.connCtx.Err() != nil {
			e.connCtx, e.connCancel = context.WithCancelCause(context.Background())
			close(e.back)
			e.back = make(chan struct{})
		}
		e.connMu.Unlock()
	}
	e.connMu.Lock()
	e.connCancel(closedErr())
	e.connMu.Unlock()
}

// onConn returns ctx, canceled as well when the connection to NATS is
// lost, for a call's NATS round trips: a request already sent when the
// connection drops would otherwise wait for its timeout. done releases it
// and turns the call's error into one wrapping engine.ErrUnavailable when
// the connection was lost meanwhile, or engine.ErrClosed when the engine
// closed meanwhile (its Close ends the connection's context with
// ErrClosed: the call was cut short by Close, not by NATS).
func (e *Engine) onConn(ctx context.Context) (_ context.Context, done func(error) error) {
	e.connMu.Lock()
	conn := e.connCtx
	e.connMu.Unlock()
	cctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(conn, func() { cancel(context.Cause(conn)) })
	return cctx, func(err error) error {
		stop()
		cause := context.Cause(cctx)
		cancel(nil)
		switch {
		case err == nil:
		case errors.Is(cause, errConnLost) && !errors.Is(err, engine.ErrUnavailable):
			err = fmt.Errorf("jsengine: %w: %w: %w", errConnLost, engine.ErrUnavailable, err)
		case (errors.Is(cause, engine.ErrClosed) || e.closed.Load()) && !errors.Is(err, engine.ErrClosed):
			err = fmt.Errorf("jsengine: %w: %w", engine.ErrClosed, err)
		}
		return err
	}
}

// roundTripMax bounds one NATS round trip of an append or a read (a
// publish, a get, a claim; a listing's set-up and each of its keys, a
// consumer's creation, info or deletion, a watcher's set-up: see
// bounded.go) whatever its caller's context allows (an append's round
// trips together are bounded by appendMax). nats.go
// waits for a reply until the context ends, and a request lost on a link
// that went silent is never answered, not even after the heal: held by a
// partition, it reaches the stream's leader of before the partition once
// another server leads, and is dropped. The engine's connection is not
// lost meanwhile (the server it is connected to was reachable), so onConn
// does not end the wait either. It is jetstream's default timeout, which
// bounds a context without a deadline.
const roundTripMax = 5 * time.Second

// roundTrip returns ctx bounded to roundTripMax from now when its
// deadline is further away, for one round trip; the caller calls the
// returned function once it has the reply. A context with a nearer
// deadline, or none (jetstream bounds it), is returned as it is, without
// an allocation.
func roundTrip(ctx context.Context) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > roundTripMax {
		return context.WithTimeout(ctx, roundTripMax)
	}
	return ctx, noCancel
}

func noCancel() {}

// appendMax bounds one append, from its call to its answer, whatever its
// caller's context allows: every round trip, reload, retry and wait of an
// append (Append, AppendAsync, with or without a MsgID) shares it, each
// round trip taking the lesser of roundTripMax and what is left, so one
// that needs several round trips over a slow link, or during a leader
// election, still answers in time, failing with errAppendTimeout (which
// wraps engine.ErrUnavailable) past it. A Block topic's appends get its
// BlockTimeout on top (blockDeadline). An append answered unavailable may
// still be stored (its publish may land late): a retry with the same
// MsgID is stored once. 8 s leaves one round trip that timed out
// (roundTripMax) room for a reload and a retry, and keeps a publish's
// answer within the 10 s the fault scenarios check.
const appendMax = 8 * time.Second

// errAppendTimeout is the cause of an append's context ending at its
// bound (appendBound), and wrapped by the error the append then returns.
var errAppendTimeout = fmt.Errorf("append not answered within %v: %w", appendMax, engine.ErrUnavailable)

// appendBound returns ctx ending at deadline (an append's start plus
// appendMax) with errAppendTimeout as its cause, for the round trips and
// waits of one append; the caller calls the returned function when the
// append is answered. A context ending sooner is returned as it is,
// without an allocation.
func appendBound(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if dl, ok := ctx.Deadline(); ok && !dl.After(deadline) {
		return ctx, noCancel
	}
	return context.WithDeadlineCause(ctx, deadline, errAppendTimeout)
}

// boundErr returns err wrapping errAppendTimeout (and so
// engine.ErrUnavailable) when ctx, from appendBound, ended at the bound:
// an error of the round trip or wait it cut short (a context error, say)
// says the append was not answered in time.
func boundErr(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, engine.ErrUnavailable) || errors.Is(err, engine.ErrBackpressure) ||
		!errors.Is(context.Cause(ctx), errAppendTimeout) {
		return err
	}
	return fmt.Errorf("jsengine: %w: %w", errAppendTimeout, err)
}

// pastBound is the error of an append whose bound (deadline, its start
// plus appendMax) has passed, nil before it; the pipelined path checks it
// where it would otherwise wait or send with no time left.
func pastBound(deadline time.Time) error {
	if time.Now().Before(deadline) {
		return nil
	}
	return fmt.Errorf("jsengine: %w", errAppendTimeout)
}

// reachable fails at once, wrapping engine.ErrUnavailable, while the
// connection to NATS is down, so calls do not wait out their timeouts
// during an outage (and, on a caller's connection that buffers while
// reconnecting, are not sent after their caller was told they failed).
func (e *Engine) reachable() error {
	if s := e.nc.Status(); s != nats.CONNECTED {
		return fmt.Errorf("jsengine: NATS connection %s: %w", strings.ToLower(s.String()), engine.ErrUnavailable)
	}
	return nil
}

// unavailable wraps an error talking to NATS: connection-level failures
// also wrap engine.ErrUnavailable, so callers may retry.
func unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	switch {
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrNoResponders),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrReconnectBufExceeded), errors.Is(err, nats.ErrConnectionDraining),
		errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, jetstream.ErrJetStreamNotEnabled),
		errors.Is(err, jetstream.ErrAsyncPublishTimeout),
		errors.Is(err, context.DeadlineExceeded), isAPIUnavailable(err):
		return fmt.Errorf("jsengine: %s: %w: %w", op, engine.ErrUnavailable, err)
	}
	return fmt.Errorf("jsengine: %s: %w", op, err)
}

// isAPIUnavailable reports a JetStream API answer of code 503: the system
// or a stream is temporarily unavailable (err_code 10008 while a leader is
// elected), out of resources, or not enabled. Either client package's
// error type may carry it.
func isAPIUnavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Code == 503
	}
	var natsErr *nats.APIError
	return errors.As(err, &natsErr) && natsErr.Code == 503
}

// isWrongLast reports a failed optimistic-concurrency check: a publish's
// expected last subject sequence or a KV revision did not match.
func isWrongLast(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
			apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
	}
	return errors.Is(err, jetstream.ErrKeyExists)
}
