package router

// Connection tickets: POST /v1/tickets trades the credential of its
// Authorization header for a short-lived, one-use ticket, which a
// WebSocket upgrade or SSE stream then carries as ?ticket= in its URL. A
// browser's WebSocket cannot send headers, and a credential in a URL is
// kept by histories, proxies and access logs; a ticket there is worth
// nothing once used or a few seconds old.
//
// A ticket stands for the credential it was issued for: the upgrade that
// redeems it is authenticated with that credential, by the keys in force
// then (so a reload in between applies), exactly as if it had come in the
// Authorization header. A ticket is redeemed once, used or refused; an
// unknown, used or expired one is a 401. Tickets live in the memory of
// the node that issued them: behind a load balancer, the ticket request
// and the upgrade must reach the same node (session affinity), or the
// client sends the header.
//
// Bounds: TicketOptions.MaxTickets unused tickets and MaxBytes of the
// credentials they hold (503 unavailable past either, with Retry-After);
// each expires after TTL. Metrics: switchyard_tickets_total{outcome} and
// switchyard_tickets.
//
// Concurrency: the ticket store is safe for concurrent use; its mutex is a
// leaf (nothing is called while it is held). No goroutine: expired
// tickets are swept by the calls that issue and redeem.

import (
	"container/list"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/router/internal/auth"
)

// TicketOptions bound the connection tickets of POST /v1/tickets. The zero
// value of each field is its default.
type TicketOptions struct {
	// TTL is how long a ticket may wait for its upgrade; default
	// DefaultTicketTTL (10s): time for a page to open its WebSocket,
	// little for a ticket copied out of a log.
	TTL time.Duration
	// MaxTickets bounds the unused tickets of the gateway; default
	// DefaultMaxTickets (10000).
	MaxTickets int
	// MaxBytes bounds the bytes of the credentials those tickets hold;
	// default DefaultMaxTicketBytes (16 MiB).
	MaxBytes int64
}

// Defaults of TicketOptions.
const (
	DefaultTicketTTL      = 10 * time.Second
	DefaultMaxTickets     = 10000
	DefaultMaxTicketBytes = 16 << 20
)

func (o TicketOptions) withDefaults() TicketOptions {
	o.TTL = positiveOr(o.TTL, DefaultTicketTTL)
	o.MaxTickets = positiveOr(o.MaxTickets, DefaultMaxTickets)
	o.MaxBytes = positiveOr(o.MaxBytes, DefaultMaxTicketBytes)
	return o
}

// positiveOr is v, or def when v is zero or negative (an option's default).
func positiveOr[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// Limits of the ticket store (limit_rejections_total labels).
const (
	limitTickets     = "tickets"
	limitTicketBytes = "ticket_bytes"
)

// ticketOverhead is what one ticket costs beyond its credential (its id,
// map entry and list element), for the MaxBytes accounting.
const ticketOverhead = 160

// ticketOutcomes label switchyard_tickets_total.
var ticketOutcomes = []string{"issued", "redeemed", "refused", "expired", "full"}

// tickets is the gateway's store of unused tickets.
type tickets struct {
	opts     TicketOptions
	outcomes *prometheus.CounterVec // outcome
	held     prometheus.Gauge
	now      func() time.Time // time.Now; tests set it before use

	mu    sync.Mutex // guards following; a leaf
	byID  map[string]*list.Element
	order *list.List // of *ticket, oldest (first to expire) first
	bytes int64
}

type ticket struct {
	id      string
	cred    string
	expires time.Time
}

func (t *ticket) size() int64 { return int64(len(t.cred)) + ticketOverhead }

func newTickets(opts TicketOptions, reg prometheus.Registerer) *tickets {
	const ns = "switchyard"
	t := &tickets{
		opts: opts,
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "tickets_total",
			Help: "Connection tickets (POST /v1/tickets) by outcome: issued, redeemed (by an upgrade or stream), refused (unknown, used or expired when presented), expired (never presented), full (not issued: past --max-tickets or --max-ticket-bytes)."}, []string{"outcome"}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "tickets",
			Help: "Connection tickets issued and not yet used or expired (bound: --max-tickets)."}),
		now:   time.Now,
		byID:  make(map[string]*list.Element),
		order: list.New(),
	}
	for _, o := range ticketOutcomes {
		t.outcomes.WithLabelValues(o)
	}
	if reg != nil {
		reg.MustRegister(t.outcomes, t.held)
	}
	return t
}

// sweepLocked forgets the tickets expired at now. t.mu is held.
func (t *tickets) sweepLocked(now time.Time) {
	for e := t.order.Front(); e != nil; e = t.order.Front() {
		tk := e.Value.(*ticket)
		if now.Before(tk.expires) {
			return
		}
		t.removeLocked(e)
		t.outcomes.WithLabelValues("expired").Inc()
	}
}

func (t *tickets) removeLocked(e *list.Element) {
	tk := t.order.Remove(e).(*ticket)
	delete(t.byID, tk.id)
	t.bytes -= tk.size()
	t.held.Set(float64(len(t.byID)))
}

// issue makes a ticket for cred, or refuses past the bounds.
func (t *tickets) issue(cred string, now time.Time) (*ticket, *protoError) {
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return nil, perr(codeInternal, "no randomness for a ticket")
	}
	tk := &ticket{id: base64.RawURLEncoding.EncodeToString(raw[:]), cred: cred, expires: now.Add(t.opts.TTL)}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	if len(t.byID) >= t.opts.MaxTickets {
		t.outcomes.WithLabelValues("full").Inc()
		return nil, refuse(limitTickets, codeUnavailable,
			"the gateway holds %d unused tickets (--max-tickets); retry in a second", t.opts.MaxTickets)
	}
	if t.bytes+tk.size() > t.opts.MaxBytes {
		t.outcomes.WithLabelValues("full").Inc()
		return nil, refuse(limitTicketBytes, codeUnavailable,
			"the gateway's unused tickets hold %d bytes of credentials (--max-ticket-bytes); retry in a second", t.opts.MaxBytes)
	}
	t.byID[tk.id] = t.order.PushBack(tk)
	t.bytes += tk.size()
	t.held.Set(float64(len(t.byID)))
	t.outcomes.WithLabelValues("issued").Inc()
	return tk, nil
}

// redeem takes the ticket id, once: it returns its credential, or false
// when the ticket is unknown, used or expired.
func (t *tickets) redeem(id string, now time.Time) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweepLocked(now)
	e, ok := t.byID[id]
	if !ok {
		t.outcomes.WithLabelValues("refused").Inc()
		return "", false
	}
	cred := e.Value.(*ticket).cred
	t.removeLocked(e)
	t.outcomes.WithLabelValues("redeemed").Inc()
	return cred, true
}

// count is the number of unused tickets.
func (t *tickets) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// errBadTicket refuses an unknown, used or expired ticket (counted as an
// invalid credential).
var errBadTicket = &authError{Reason: auth.ErrBadCredential.Reason,
	Msg: "the ticket is unknown, used or expired: ask POST /v1/tickets for a new one just before connecting"}

// ticketCredential returns the credential of the request's ?ticket=,
// redeeming it, or "" when the request names none.
func (rt *Router) ticketCredential(c echo.Context) (string, error) {
	id := c.QueryParam("ticket")
	if id == "" {
		return "", nil
	}
	cred, ok := rt.tickets.redeem(id, rt.tickets.now())
	if !ok {
		return "", rt.unauthorized(c, errBadTicket, "")
	}
	return cred, nil
}

// ticketRoutes registers POST /v1/tickets.
func (rt *Router) ticketRoutes(e *echo.Echo) {
	e.POST("/v1/tickets", rt.httpTicket)
}

// httpTicket issues a ticket for the request's credential. authAPI has
// checked it when the gateway has keys; without keys the ticket stands for
// no credential and the upgrade is let in as any other.
func (rt *Router) httpTicket(c echo.Context) error {
	cred, ok := bearer(c.Request())
	if !ok {
		return rt.unauthorized(c, errNotBearer, wire.HintToken)
	}
	tk, pe := rt.tickets.issue(cred, rt.tickets.now())
	if pe != nil {
		c.Response().Header().Set("Retry-After", "1")
		return pe
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, map[string]any{
		"ticket":  tk.id,
		"expires": tk.expires.UTC().Format(time.RFC3339Nano),
		"ttl_ms":  rt.tickets.opts.TTL.Milliseconds(),
	})
}
