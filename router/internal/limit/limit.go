// Package limit holds the gateway's token and slot mechanisms: connection
// slots in total and per client IP (Conns), a token bucket per client IP
// for connect attempts and HTTP publishes (PerIP), and a subscription's
// bucket of queue_full dead letters (Bucket). They decide only; the router
// counts refusals and turns them into protocol errors and HTTP statuses.
//
// Concurrency: Conns and PerIP are safe for concurrent use, each with one
// leaf mutex. A Bucket is not: its owner guards it.
package limit

import (
	"math"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Names of the connection limits, as Conns.Acquire reports them (the
// switchyard_limit_rejections_total labels).
const (
	Connections      = "connections"
	ConnectionsPerIP = "connections_per_ip"
)

// Conns counts connection slots, in total and per client IP. Zero bounds
// are unlimited.
type Conns struct {
	mu            sync.Mutex // guards the fields below; a leaf lock
	max, maxPerIP int        // SetMax changes them
	n             int
	perIP         map[string]int
}

// NewConns bounds the connections to max in total and maxPerIP per
// client IP; 0: no bound.
func NewConns(max, maxPerIP int) *Conns {
	return &Conns{max: max, maxPerIP: maxPerIP, perIP: make(map[string]int)}
}

// SetMax changes the bounds; the slots already taken stay taken and count
// against the new bounds.
func (c *Conns) SetMax(max, maxPerIP int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.max, c.maxPerIP = max, maxPerIP
}

// Acquire takes a connection slot for ip; release gives it back and may be
// called more than once. It fails with the limit's name (Connections or
// ConnectionsPerIP) and a nil release.
func (c *Conns) Acquire(ip string) (release func(), limit string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.max > 0 && c.n >= c.max {
		return nil, Connections
	}
	if c.maxPerIP > 0 && c.perIP[ip] >= c.maxPerIP {
		return nil, ConnectionsPerIP
	}
	c.n++
	c.perIP[ip]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			c.n--
			if c.perIP[ip]--; c.perIP[ip] <= 0 {
				delete(c.perIP, ip)
			}
			c.mu.Unlock()
		})
	}, ""
}

// PerIP is a token bucket per client IP: rate a second, burst the rate
// rounded down (at least 1). A rate of 0 allows everything. Buckets idle
// for rateIdle are dropped, so the map holds only the addresses of the
// last minute.
type PerIP struct {
	rate  float64
	burst int

	mu    sync.Mutex // guards the fields below; a leaf lock
	rates map[string]*ipRate
	swept time.Time
}

type ipRate struct {
	lim  *rate.Limiter
	seen time.Time
}

// rateIdle is how long an idle client IP's bucket is kept.
const rateIdle = time.Minute

// NewPerIP makes buckets of r tokens a second; 0: unlimited.
func NewPerIP(r float64) *PerIP {
	return &PerIP{rate: r, burst: max(1, int(r)), rates: make(map[string]*ipRate)}
}

// Rate is the tokens a second of each bucket.
func (b *PerIP) Rate() float64 { return b.rate }

// Allow takes a token from ip's bucket at now.
func (b *PerIP) Allow(ip string, now time.Time) bool {
	if b.rate <= 0 {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if now.Sub(b.swept) > rateIdle {
		for k, r := range b.rates {
			if now.Sub(r.seen) > rateIdle {
				delete(b.rates, k)
			}
		}
		b.swept = now
	}
	r := b.rates[ip]
	if r == nil {
		r = &ipRate{lim: rate.NewLimiter(rate.Limit(b.rate), b.burst)}
		b.rates[ip] = r
	}
	r.seen = now
	return r.lim.AllowN(now, 1)
}

// Bucket is a token bucket kept by hand, for a subscription's queue_full
// dead letters: a plain value inside the subscription, with no lock of its
// own (its owner's lock guards it) and nothing to allocate. The zero value
// is a full bucket.
type Bucket struct {
	started bool
	tokens  float64
	last    time.Time
}

// Take reports whether a token may be taken at now from a bucket of burst
// tokens refilled at rate a second. A negative rate never allows; +Inf
// always does.
func (d *Bucket) Take(rate float64, burst int, now time.Time) bool {
	switch {
	case rate < 0:
		return false
	case math.IsInf(rate, 1):
		return true
	}
	size := float64(burst)
	if !d.started {
		d.started, d.tokens, d.last = true, size, now
	} else if dt := now.Sub(d.last); dt > 0 {
		d.tokens = min(size, d.tokens+dt.Seconds()*rate)
		d.last = now
	}
	if d.tokens < 1 {
		return false
	}
	d.tokens--
	return true
}
