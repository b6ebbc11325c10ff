package main

// Publishing over HTTP. With --publish-over the plain scenarios (fanout,
// wildcard, slow, idle, smoke) publish through the gateway's HTTP API
// instead of, or besides, WebSocket:
//
//	ws          WebSocket publishers (--publishers, --window), as without the flag
//	http        --http-conns keep-alive connections, one record per
//	            POST /v1/publish, one request at a time on each
//	http-batch  the same connections, up to --batch records per
//	            POST /v1/publish {"records":[…]}
//
// A comma-separated list ("ws,http,http-batch") runs one phase per mode,
// one after the other, against the same subscribers: each phase publishes
// for --duration at --rate (the offered rate, shared by the phase's
// publishers), then waits (up to --drain) until every subscriber has what
// was published, so that the server CPU measured over the phase (with
// --server-pid) is that phase's. The report lists each phase: publishes
// offered and served, deliveries, and server CPU per delivery, which is
// the comparison of one load published over each path in one run.
//
// An HTTP publisher paces like a WebSocket one: with --rate R over C
// connections each sends its share R/C, catching up after a slow reply,
// so a gateway that cannot keep up serves fewer than offered; with
// --rate 0 each sends as fast as replies come back. A batch publisher
// sends what is due (at most --batch records) in one request; at
// --rate 0 every request is a full batch. Every record of one request
// goes to one topic (round-robin over requests), so a reply's results
// count against that topic without decoding them.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Publish modes of --publish-over.
const (
	overWS        = "ws"
	overHTTP      = "http"
	overHTTPBatch = "http-batch"
)

// PhaseReport is what one --publish-over phase published and cost.
type PhaseReport struct {
	Over string `json:"over"` // ws, http or http-batch
	// Offered is --rate × the phase's seconds; 0 with --rate 0.
	Offered  int64 `json:"offered"`
	Served   int64 `json:"served"` // publishes the gateway confirmed
	Errors   int64 `json:"errors"`
	Requests int64 `json:"requests,omitempty"` // HTTP requests made
	// RequestLatency is the HTTP requests' round trips (http, http-batch).
	RequestLatency *Percentiles `json:"request_latency,omitempty"`
	Seconds        float64      `json:"seconds"`
	PublishesPerS  float64      `json:"publishes_per_s"`
	Delivered      int64        `json:"delivered"` // over the phase and its drain
	// ServerCPU (with --server-pid) is over the phase and its drain.
	ServerCPU     *float64 `json:"server_cpu_s,omitempty"`
	ServerCPUPerD *float64 `json:"server_cpu_us_per_delivery,omitempty"`
}

// parsePublishOver checks a --publish-over list.
func parsePublishOver(s string) ([]string, error) {
	var modes []string
	for _, m := range strings.Split(s, ",") {
		switch m = strings.TrimSpace(m); m {
		case overWS, overHTTP, overHTTPBatch:
			modes = append(modes, m)
		default:
			return nil, fmt.Errorf("--publish-over %q: want a list of ws, http and http-batch", s)
		}
	}
	return modes, nil
}

// publishPhases runs one publishing phase per --publish-over mode, each
// followed by a drain until drained reports true, and returns the
// WebSocket publishers' connections (for the caller to close) and a
// report per phase.
func (r *runner) publishPhases(ctx context.Context, topics []int, drained func() bool) ([]*subscriber, []PhaseReport, error) {
	var pubs []*subscriber
	var phases []PhaseReport
	for _, mode := range r.cfg.over {
		ph := PhaseReport{Over: mode}
		sent0, err0, del0 := r.c.sent.Load(), r.c.publishErrors.Load(), r.c.delivered.Load()
		var cpu0 time.Duration
		if r.cfg.serverPID > 0 {
			cpu0, _ = procCPU(r.cfg.serverPID)
		}
		start := time.Now()
		switch mode {
		case overWS:
			p, err := r.publish(ctx, topics)
			if err != nil {
				return pubs, phases, err
			}
			pubs = append(pubs, p...)
		default:
			h := newHistogram()
			ph.Requests = r.publishHTTP(ctx, topics, mode == overHTTPBatch, h)
			pct := h.percentiles()
			ph.RequestLatency = &pct
		}
		ph.Seconds = time.Since(start).Seconds()
		if len(r.cfg.over) > 1 {
			r.drain(ctx, drained)
		}
		ph.Served, ph.Errors = r.c.sent.Load()-sent0, r.c.publishErrors.Load()-err0
		ph.Delivered = r.c.delivered.Load() - del0
		if r.cfg.rate > 0 {
			ph.Offered = int64(r.cfg.rate*r.cfg.duration.Seconds() + 0.5)
		}
		if ph.Seconds > 0 {
			ph.PublishesPerS = float64(ph.Served) / ph.Seconds
		}
		if r.cfg.serverPID > 0 {
			if cpu1, err := procCPU(r.cfg.serverPID); err == nil {
				s := (cpu1 - cpu0).Seconds()
				ph.ServerCPU = &s
				if ph.Delivered > 0 {
					us := s * 1e6 / float64(ph.Delivered)
					ph.ServerCPUPerD = &us
				}
			}
		}
		fmt.Fprintf(r.log, "phase %s: served %d of %d offered, %d delivered\n", mode, ph.Served, ph.Offered, ph.Delivered)
		phases = append(phases, ph)
	}
	return pubs, phases, nil
}

// publishHTTP publishes over --http-conns keep-alive connections for
// --duration at --rate, one record per request or (batch) up to --batch
// records per request, recording each request's round trip in lat. It
// returns the requests made.
func (r *runner) publishHTTP(ctx context.Context, topics []int, batch bool, lat *histogram) int64 {
	cfg := r.cfg
	conns := cfg.httpConns
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxConnsPerHost:     conns,
		MaxIdleConnsPerHost: conns,
		DisableCompression:  true,
	}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	per := 1
	if batch {
		per = cfg.batch
	}
	deadline := time.Now().Add(cfg.duration)
	rate := cfg.rate / float64(conns)
	var quota int64
	if cfg.messages > 0 {
		quota = max(1, cfg.messages/int64(conns))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var requests int64
	for i := range conns {
		wg.Add(1)
		go func() { // exits at the deadline, the quota or ctx's end
			defer wg.Done()
			hp := &httpPublisher{r: r, hc: hc, batch: batch, url: cfg.httpURL + "/v1/publish", lat: lat, idx: i}
			n := hp.run(ctx, topics, i, rate, quota, per, deadline)
			mu.Lock()
			requests += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	return requests
}

// httpPublisher is one HTTP connection's publishing loop; its buffers
// are reused from request to request.
type httpPublisher struct {
	r     *runner
	hc    *http.Client
	url   string
	batch bool
	lat   *histogram
	idx   int
	body  []byte
	reply []byte
}

// run sends requests until the deadline or the quota, paced at rate
// records/s (0: as fast as replies come back), each of at most per
// records; it returns the requests made.
func (hp *httpPublisher) run(ctx context.Context, topics []int, idx int, rate float64, quota int64, per int, deadline time.Time) int64 {
	start := time.Now()
	var n, reqs int64 // records sent, requests made
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(deadline) || (quota > 0 && n >= quota) {
			return reqs
		}
		k := int64(per)
		if rate > 0 {
			k = min(k, int64(now.Sub(start).Seconds()*rate)+1-n)
		}
		if quota > 0 {
			k = min(k, quota-n)
		}
		if k <= 0 {
			time.Sleep(time.Millisecond)
			continue
		}
		ti := topics[(int64(idx)+reqs)%int64(len(topics))]
		hp.send(ctx, ti, n, int(k))
		n += k
		reqs++
	}
	return reqs
}

// send posts k records to topic ti and counts what the reply confirms.
func (hp *httpPublisher) send(ctx context.Context, ti int, n int64, k int) {
	r := hp.r
	topic := r.topics[ti]
	b := hp.body[:0]
	if hp.batch {
		b = append(b, `{"records":[`...)
	}
	for j := range k {
		if j > 0 {
			b = append(b, ',')
		}
		b = appendHTTPRecord(b, topic, r.cfg.size, time.Now())
	}
	if hp.batch {
		b = append(b, "]}"...)
	}
	hp.body = b
	fail := func(format string, args ...any) {
		if r.c.publishErrors.Add(int64(k)) <= 5 && ctx.Err() == nil {
			fmt.Fprintf(r.log, "http publish: "+format+"\n", args...)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, hp.url, bytes.NewReader(b))
	if err != nil {
		fail("%v", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	began := time.Now()
	resp, err := hp.hc.Do(req)
	if err != nil {
		fail("%v", err)
		return
	}
	hp.reply, err = readAllInto(hp.reply[:0], resp.Body, 1<<20)
	resp.Body.Close()
	hp.lat.record(hp.idx, time.Since(began))
	if err != nil {
		fail("reading the reply: %v", err)
		return
	}
	if resp.StatusCode != http.StatusOK {
		fail("HTTP %d: %.200s", resp.StatusCode, hp.reply)
		return
	}
	ok := int64(bytes.Count(hp.reply, keyOffset))
	if ok > int64(k) {
		ok = int64(k)
	}
	if bad := int64(k) - ok; bad > 0 {
		if r.c.publishErrors.Add(bad) <= 5 {
			fmt.Fprintf(r.log, "http publish: %d of %d records refused: %.200s\n", bad, k, hp.reply)
		}
	}
	r.sentTo[ti].Add(ok)
	r.c.sent.Add(ok)
}

// appendHTTPRecord appends one publish body (or batch record) whose data
// is a JSON string of size bytes (quotes included) carrying now's unix
// nanoseconds, as appendPublish does for WebSocket.
func appendHTTPRecord(dst []byte, topic string, size int, now time.Time) []byte {
	dst = append(dst, `{"topic":"`...)
	dst = append(dst, topic...)
	dst = append(dst, `","data":"`+payloadMark...)
	dst = fmt.Appendf(dst, "%019d", now.UnixNano())
	for range max(0, size-minPayload) {
		dst = append(dst, 'x')
	}
	return append(dst, `"}`...)
}

// readAllInto appends what rd holds (at most limit bytes) to dst.
func readAllInto(dst []byte, rd io.Reader, limit int) ([]byte, error) {
	for len(dst) < limit {
		if len(dst) == cap(dst) {
			dst = append(dst, 0)[:len(dst)]
		}
		m, err := rd.Read(dst[len(dst):min(cap(dst), limit)])
		dst = dst[:len(dst)+m]
		if errors.Is(err, io.EOF) {
			return dst, nil
		}
		if err != nil {
			return dst, err
		}
	}
	return dst, errors.New("reply larger than 1 MiB")
}
