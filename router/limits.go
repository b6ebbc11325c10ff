package router

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router/internal/limit"
	"github.com/switchyard/switchyard/trie"
)

// PublishEnvelopeBytes returns the most bytes a WebSocket publish frame
// may hold besides its data under the bounds b (zero fields taking their
// defaults), rounded up to a KiB: the id, the topic, key, msg_id and
// headers at their limits with every byte of theirs escaped as JSON allows
// (six bytes at most, as \u003c), and envelopeFixedBytes for the field
// names, the priority and a space after every ':' and ','. With the
// default bounds it is 59,392 bytes. Options.Session.ReadLimit defaults to
// MaxMessageBytes plus this, so that a publish whose data is within the
// message limit always fits in a frame, and one whose data is over it gets
// message_too_large instead of closing the session with 1009.
func PublishEnvelopeBytes(b Bounds) int {
	b = b.withDefaults()
	n := 6*(b.MaxTopicBytes+b.MaxKeyBytes+b.MaxMsgIDBytes+b.MaxHeaderBytes) +
		envelopeHeaderBytes*b.MaxHeaders + b.MaxIDBytes + envelopeFixedBytes
	return (n + 1023) &^ 1023
}

// The parts of PublishEnvelopeBytes that no bound sets: a header's quotes,
// colon and comma with two spaces (8 bytes), and the rest of the frame's
// punctuation, field names and priority with their spaces and an
// "encoding" field (256 bytes; about 130 are needed).
const (
	envelopeHeaderBytes = 8
	envelopeFixedBytes  = 256
)

// limiter enforces the connection, topic and HTTP publish rate limits; the
// slot and bucket mechanisms are in router/internal/limit. It is safe for
// concurrent use.
// The bounds a reload may change are in the live settings (reload.go):
// the topic bound, the connect and HTTP publish buckets there, the
// connection bounds set on conns.
type limiter struct {
	conns *limit.Conns

	known sync.Map // topic -> struct{}: topics seen to exist (for maxTopics)
}

func newLimiter(o Options) *limiter {
	return &limiter{
		conns: limit.NewConns(o.MaxConnections, o.MaxConnectionsPerIP),
	}
}

// acquireConn takes a connection slot for ip before the WebSocket upgrade;
// release gives it back. It fails with the limit's name.
func (l *limiter) acquireConn(ip string) (release func(), refused string) {
	return l.conns.Acquire(ip)
}

// Limits of a connect (limit_rejections_total labels) checked before its
// credential.
const (
	limitConnectRate     = "connect_rate_per_ip"
	limitConnectHookAddr = "connect_hook_per_ip"
)

// admitConn admits a WebSocket upgrade or SSE stream: every local limit
// first (the connect rate, connections, connections per IP), then the
// credential, whose check may ask the connect hook or read the JWKS. So an
// address past a limit costs the application nothing, and the hook's slots
// go to connects that can be let in. On refusal by a limit it has written
// the response and returns a nil release and error; when the credential
// is refused it has given the slot back and returns the error. Otherwise
// the caller owns release.
func (rt *Router) admitConn(c echo.Context) (who *principal, release func(), err error) {
	if release = rt.reserveConn(c); release == nil {
		return nil, nil, nil
	}
	if who, err = rt.authWS(c); err != nil {
		release()
		return nil, nil, err
	}
	return who, release, nil
}

// reserveConn applies the connect rate and the connection limits to a
// WebSocket upgrade or SSE stream. On refusal it has written the JSON error
// (503 for the global limit, 429 per IP) and returns nil.
func (rt *Router) reserveConn(c echo.Context) func() {
	ip := c.RealIP()
	connect := rt.settings().connect
	if !connect.Allow(ip, time.Now()) {
		rt.lim.limited.WithLabelValues(limitConnectRate).Inc()
		c.Response().Header().Set("Retry-After", "1")
		_ = c.JSON(http.StatusTooManyRequests, map[string]string{"code": codeRateLimited,
			"message": fmt.Sprintf("more than %g connects a second from this address; retry later", connect.Rate())})
		return nil
	}
	release, refused := rt.limits.acquireConn(ip)
	if release != nil {
		return release
	}
	rt.lim.limited.WithLabelValues(refused).Inc()
	status, msg := http.StatusServiceUnavailable, "the gateway is at its connection limit; retry later"
	if refused == limit.ConnectionsPerIP {
		status, msg = http.StatusTooManyRequests, "too many connections from this address"
	}
	c.Response().Header().Set("Retry-After", "1")
	_ = c.JSON(status, map[string]string{"code": codeTooManyConnections, "message": msg})
	return nil
}

// checkTopicLimit refuses to auto-create a topic past Options.MaxTopics,
// and creates one a topic policy names with its settings. It
// counts the engine's topics (not $ topics) only when topic is not known to
// exist, so the steady state costs one map lookup. Concurrent first
// publishes to different new topics may each see room and all create: the
// limit can be exceeded by at most the number of such publishes in flight
// at once, per gateway node.
func (rt *Router) checkTopicLimit(ctx context.Context, topic string) error {
	l := rt.limits
	set := rt.settings()
	if set.maxTopics <= 0 && len(set.policies) == 0 {
		return nil
	}
	if _, ok := l.known.Load(topic); ok {
		return nil
	}
	if _, err := rt.eng.Topic(ctx, topic); err == nil {
		l.known.Store(topic, struct{}{})
		return nil
	} else if !errors.Is(err, engine.ErrUnknownTopic) {
		return err
	}
	if err := rt.roomForTopic(ctx); err != nil {
		return err
	}
	return rt.createByPolicy(ctx, set, topic) // topic_policies.go
}

// roomForTopic fails with too_many_topics when MaxTopics topics exist.
func (rt *Router) roomForTopic(ctx context.Context) error {
	maxTopics := rt.settings().maxTopics
	if maxTopics <= 0 {
		return nil
	}
	ts, err := rt.eng.Topics(ctx)
	if err != nil {
		return err
	}
	n := 0
	for _, t := range ts {
		if !trie.IsSystem(t.Config.Name) {
			n++
		}
	}
	if n >= maxTopics {
		rt.lim.limited.WithLabelValues("topics").Inc()
		return perr(codeTooManyTopics, "the gateway holds its limit of %d topics", maxTopics)
	}
	return nil
}

// forgetTopic drops a deleted topic from the known set.
func (l *limiter) forgetTopic(topic string) { l.known.Delete(topic) }
