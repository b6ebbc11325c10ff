package main

// The hostile clients of `soak --hostile`: while the soak's normal traffic
// runs, a mix of clients try to make the gateway hold memory or work it
// should not. Each is a loop over raw sockets (WebSocket frames are written
// by hand, so that a client can stop mid-message or never read):
//
//   - oversized errors: invalid publishes with kilobyte topic names, sent as
//     fast as the socket takes them, replies never read. The gateway must
//     refuse each by the topic limits, cap what each error echoes, and
//     close the session once the unread replies fill its queue (1008 by
//     bytes, or 1013 by the queue's item bound, whichever comes first).
//   - huge filters and ids: subscribes with a filter of thousands of headers
//     (about 600 KiB), publishes with a 512 KiB msg_id and a 64 KiB key;
//     replies never read. Each must be refused by the size limits.
//   - fragments: a text message begun with a 512 KiB first fragment and
//     never finished. The gateway must bound it and close the session after
//     its fragment timeout.
//   - stalled subscribers: sessions on "#" that never read, so every record
//     overflows their queue (gaps, sampled queue_full dead letters).
//   - stalled listing readers: GET /v1/topics?limit=1000, reply never read.
//   - topic spray: publishes to ever new topic names, replies never read;
//     the in-process gateway runs with --max-topics hostileMaxTopics.
//   - trickling HTTP: a POST whose body arrives a byte every 250 ms; the
//     read timeout must cut it off.
//   - cross-site: a text/plain POST /v1/publish with a foreign Origin; it
//     must be refused (403), never published.
//
// The attacks on SSE, presence, pull and WebSocket groups are in
// hostile_surfaces.go, the connect storm against a slow hook in
// hostile_hook.go.
//
// The soak's checks stand as they are: every bystander (fast reader,
// churner, group member) must see everything exactly once, the gateway must
// close none of them, log nothing at warn or error and come back to its
// goroutine baseline. On top, the hostile run bounds the peak of the
// gateway's live heap during the load (--hostile-heap-mib above the
// baseline) and requires that the limits were actually met (the counters
// named in hostileEvidence moved).
//
// Why the heap and not RSS: in-process, the generator and the gateway are
// one process, and the Go runtime keeps freed pages mapped for minutes, so
// RSS shows the high-water mark of both; the live heap after a GC is what
// the gateway holds at that moment, which is what a client must not be
// able to pin. RSS is sampled and reported alongside.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// hostileMaxTopics is the --inprocess gateway's topic limit in hostile
// runs: the spray meets too_many_topics once it has created about this
// many.
const hostileMaxTopics = 100

// hostileConns is how many connections the hostile clients hold at once.
const hostileConns = 2 + 1 + 4 + 4 + 4 + 1 + 4 + 1 + hostileSurfaceConns

// hostileEvidence are the gateway counters a hostile run must move, each
// a list of alternatives (the first limit a request meets is the one
// counted): each shows that a limit was met rather than the attack silently
// failing.
var hostileEvidence = [][]string{
	{`switchyard_http_timeouts_total{phase="read"}`},
	{`switchyard_http_refused_total{reason="origin"}`},
	{`switchyard_limit_rejections_total{limit="topics"}`},
	{`switchyard_limit_rejections_total{limit="topic_bytes"}`, `switchyard_limit_rejections_total{limit="topic_depth"}`},
	{`switchyard_limit_rejections_total{limit="filter_headers"}`, `switchyard_limit_rejections_total{limit="filter_bytes"}`},
	{`switchyard_limit_rejections_total{limit="msg_id_bytes"}`, `switchyard_limit_rejections_total{limit="key_bytes"}`},
	{`switchyard_limit_rejections_total{limit="message_timeout"}`},
	{`switchyard_dead_letters_skipped_total`},
	// Unread error replies end the session: by their bytes (1008) or,
	// with small replies, first by the queue's item bound (1013).
	{`switchyard_limit_rejections_total{limit="control_queue_bytes"}`, `switchyard_slow_consumer_disconnects_total`},
	// The newer surfaces (hostile_surfaces.go).
	{`switchyard_sse_resumes_total{outcome="refused"}`},
	{`switchyard_limit_rejections_total{limit="presence_join_rate"}`},
	{`switchyard_presence_resyncs_total`},
	{`switchyard_limit_rejections_total{limit="pull_members_per_client"}`},
	{`switchyard_limit_rejections_total{limit="session_leases"}`},
}

// hostileReported are further counters the report shows without
// requiring them.
var hostileReported = []string{
	`switchyard_http_timeouts_total{phase="write"}`,
	`switchyard_http_timeouts_total{phase="read_header"}`,
	`switchyard_limit_rejections_total{limit="connect_hook_per_ip"}`, // with --inprocess (hostile_hook.go)
	`switchyard_presence_announcements_dropped_total`,
	`switchyard_sse_untracked_deliveries_total`,
	`switchyard_pull_members`,
	`switchyard_group_session_leases_reserved`,
}

func evidenceNames() []string {
	var out []string
	for _, alts := range hostileEvidence {
		out = append(out, alts...)
	}
	return append(out, hostileReported...)
}

// HostileReport sums up the hostile clients of a run.
type HostileReport struct {
	Actors       []HostileActor   `json:"actors"`
	PeakHeap     int64            `json:"peak_heap_bytes"`
	PeakRSS      int64            `json:"peak_rss_bytes"`
	MaxHeapBytes int64            `json:"max_heap_growth_bytes"`
	Evidence     map[string]int64 `json:"evidence"`
	Seen         map[string]int64 `json:"client_seen"` // what the clients saw of the bounds
}

// HostileActor is one kind of hostile client.
type HostileActor struct {
	Name     string `json:"name"`
	Attempts int64  `json:"attempts"` // connections or requests made
	Closed   int64  `json:"closed"`   // of them, ended by the gateway
}

type hostileActor struct {
	name             string
	attempts, closed atomic.Int64
}

// hostile runs the clients above until stop is closed.
type hostile struct {
	host   string // host:port of the gateway
	wsPath string
	origin string
	actors []*hostileActor
	forged []string     // Last-Event-IDs of forgedResume
	httpc  *http.Client // of the HTTP clients in hostile_surfaces.go
	tally  surfaceTally
	wg     sync.WaitGroup
	// starved, when set, reports whether this process was starved of CPU
	// at some time in [from, to] (the torture run's overload watch).
	starved func(from, to time.Time) bool
}

func newHostile(wsURL string) (*hostile, error) {
	u, err := url.Parse(wsURL)
	if err != nil {
		return nil, err
	}
	return &hostile{host: u.Host, wsPath: u.Path, origin: "https://hostile.example"}, nil
}

func (h *hostile) actor(name string) *hostileActor {
	a := &hostileActor{name: name}
	h.actors = append(h.actors, a)
	return a
}

// start launches every client; each exits once stop is closed (closing its
// sockets) or ctx is done. wait waits for them.
func (h *hostile) start(ctx context.Context, stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(ctx)
	go func() { // exits with stop or ctx
		select {
		case <-stop:
		case <-ctx.Done():
		}
		cancel()
	}()
	loop := h.looper(ctx)
	loop(h.actor("oversized_errors"), 2, h.oversizedErrors)
	loop(h.actor("huge_filters_and_ids"), 1, h.hugeFilters)
	loop(h.actor("fragments"), 4, h.fragment)
	loop(h.actor("stalled_subscribers"), 4, h.stalledSubscriber)
	loop(h.actor("stalled_listing_readers"), 4, h.stalledListing)
	loop(h.actor("topic_spray"), 1, h.topicSpray)
	loop(h.actor("trickling_http"), 4, h.trickle)
	loop(h.actor("cross_site"), 1, h.crossSite)
	h.startSurfaces(loop)
}

// looper returns the function that starts n goroutines each running once
// over and over until ctx is done, backing off when once fails; wait
// waits for them. Both the hostile soak and the torture run start their
// hostile clients with it.
func (h *hostile) looper(ctx context.Context) func(a *hostileActor, n int, once func(context.Context, *hostileActor) error) {
	return func(a *hostileActor, n int, once func(context.Context, *hostileActor) error) {
		for range n {
			h.wg.Go(func() {
				for ctx.Err() == nil {
					a.attempts.Add(1)
					if err := once(ctx, a); err != nil && ctx.Err() == nil {
						pause(ctx, 100*time.Millisecond) // the gateway refused the connection: back off
					}
				}
			})
		}
	}
}

func (h *hostile) wait() { h.wg.Wait() }

func (h *hostile) report() []HostileActor {
	out := make([]HostileActor, 0, len(h.actors))
	for _, a := range h.actors {
		out = append(out, HostileActor{Name: a.name, Attempts: a.attempts.Load(), Closed: a.closed.Load()})
	}
	return out
}

// pause waits d or until ctx is done.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// dialRaw opens TCP to the gateway with a small receive buffer, and closes
// it when ctx is done.
func (h *hostile) dialRaw(ctx context.Context) (net.Conn, func(), error) {
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4<<10)
		})
		return errors.Join(err, serr)
	}}
	c, err := d.DialContext(ctx, "tcp", h.host)
	if err != nil {
		return nil, nil, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	return c, func() { stop(); c.Close() }, nil
}

// dialWS opens a WebSocket by hand and reads the upgrade reply (not the
// welcome frame). The returned reader holds what followed the reply.
func (h *hostile) dialWS(ctx context.Context) (net.Conn, *bufio.Reader, func(), error) {
	c, done, err := h.dialRaw(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	var key [16]byte
	_, _ = rand.Read(key[:])
	req := "GET " + h.wsPath + " HTTP/1.1\r\nHost: " + h.host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key[:]) + "\r\n\r\n"
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		done()
		return nil, nil, nil, err
	}
	br := bufio.NewReaderSize(c, 4096)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		done()
		return nil, nil, nil, fmt.Errorf("upgrade: %s", resp.Status)
	}
	_ = c.SetDeadline(time.Time{})
	return c, br, done, nil
}

// wsFrame appends a masked client frame.
func wsFrame(dst []byte, opcode byte, fin bool, payload []byte) []byte {
	b0 := opcode
	if fin {
		b0 |= 0x80
	}
	dst = append(dst, b0)
	switch n := len(payload); {
	case n < 126:
		dst = append(dst, 0x80|byte(n))
	case n <= 0xffff:
		dst = append(dst, 0x80|126)
		dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	default:
		dst = append(dst, 0x80|127)
		dst = binary.BigEndian.AppendUint64(dst, uint64(n))
	}
	var mask [4]byte
	_, _ = rand.Read(mask[:])
	dst = append(dst, mask[:]...)
	start := len(dst)
	dst = append(dst, payload...)
	for i := range payload {
		dst[start+i] ^= mask[i%4]
	}
	return dst
}

// writeAll writes frames, counting a write failure (the gateway closed the
// connection) as closed. It reports whether the connection still stands.
func writeAll(ctx context.Context, c net.Conn, a *hostileActor, data []byte) bool {
	_ = c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(data); err != nil {
		if ctx.Err() == nil {
			a.closed.Add(1)
		}
		return false
	}
	return true
}

// awaitClose reads (and drops) until the gateway closes the connection or
// d passes; it counts a close.
func awaitClose(ctx context.Context, c net.Conn, a *hostileActor, d time.Duration) {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if ctx.Err() == nil && !(errors.As(err, &ne) && ne.Timeout()) {
		a.closed.Add(1)
	}
}

func (h *hostile) oversizedErrors(ctx context.Context, a *hostileActor) error {
	c, _, done, err := h.dialWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	topic := strings.Repeat("x.", 600) + "$bad"
	var batch []byte
	for i := range 16 {
		batch = wsFrame(batch, 1, true, fmt.Appendf(nil, `{"op":"publish","id":%d,"topic":%q,"data":1}`, i, topic))
	}
	for range 2000 { // 32,000 invalid publishes at most per connection
		if !writeAll(ctx, c, a, batch) {
			return nil
		}
	}
	return nil
}

func (h *hostile) hugeFilters(ctx context.Context, a *hostileActor) error {
	c, _, done, err := h.dialWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	var filter strings.Builder
	filter.WriteString(`{"op":"subscribe","id":1,"pattern":"hostile.filter.#","filter":{"headers":{`)
	for i := range 4000 {
		if i > 0 {
			filter.WriteByte(',')
		}
		fmt.Fprintf(&filter, `"h%04d":"%s"`, i, strings.Repeat("v", 140))
	}
	filter.WriteString(`}}}`)
	big := fmt.Appendf(nil, `{"op":"publish","id":2,"topic":"hostile.ids","msg_id":"%s","key":"%s","data":1}`,
		strings.Repeat("m", 512<<10), strings.Repeat("k", 64<<10))
	var batch []byte
	batch = wsFrame(batch, 1, true, []byte(filter.String()))
	batch = wsFrame(batch, 1, true, big)
	for range 20 {
		if !writeAll(ctx, c, a, batch) {
			return nil
		}
		pause(ctx, 50*time.Millisecond)
	}
	return nil
}

func (h *hostile) fragment(ctx context.Context, a *hostileActor) error {
	c, _, done, err := h.dialWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	part := append([]byte(`{"op":"publish","topic":"hostile.frag","data":"`), bytes.Repeat([]byte("f"), 512<<10)...)
	if !writeAll(ctx, c, a, wsFrame(nil, 1, false, part)) {
		return nil
	}
	awaitClose(ctx, c, a, 60*time.Second)
	return nil
}

func (h *hostile) stalledSubscriber(ctx context.Context, a *hostileActor) error {
	c, _, done, err := h.dialWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !writeAll(ctx, c, a, wsFrame(nil, 1, true, []byte(`{"op":"subscribe","id":1,"pattern":"#","on_full":"drop_old"}`))) {
		return nil
	}
	<-ctx.Done() // never read
	return nil
}

func (h *hostile) stalledListing(ctx context.Context, a *hostileActor) error {
	c, done, err := h.dialRaw(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !writeAll(ctx, c, a, []byte("GET /v1/topics?limit=1000 HTTP/1.1\r\nHost: "+h.host+"\r\n\r\n")) {
		return nil
	}
	// Never read: the write timeout (or, when the page fit in the socket
	// buffers, the idle timeout) ends it. Give up after a minute.
	pause(ctx, time.Minute)
	return nil
}

func (h *hostile) topicSpray(ctx context.Context, a *hostileActor) error {
	c, _, done, err := h.dialWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	for i := 0; i < 5000 && ctx.Err() == nil; i++ {
		f := wsFrame(nil, 1, true, fmt.Appendf(nil, `{"op":"publish","topic":"hostile.spray.%d.%d","data":1}`, time.Now().UnixNano(), i))
		if !writeAll(ctx, c, a, f) {
			return nil
		}
		pause(ctx, 2*time.Millisecond)
	}
	return nil
}

func (h *hostile) trickle(ctx context.Context, a *hostileActor) error {
	c, done, err := h.dialRaw(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !writeAll(ctx, c, a, []byte("POST /v1/publish HTTP/1.1\r\nHost: "+h.host+"\r\nContent-Type: application/json\r\nContent-Length: 4000\r\n\r\n")) {
		return nil
	}
	for range 4000 { // at most about 17 minutes; the read timeout ends it first
		if !writeAll(ctx, c, a, []byte{' '}) {
			return nil
		}
		pause(ctx, 250*time.Millisecond)
		if ctx.Err() != nil {
			return nil
		}
	}
	return nil
}

func (h *hostile) crossSite(ctx context.Context, a *hostileActor) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+h.host+"/v1/publish",
		strings.NewReader(`{"topic":"hostile.csrf","data":1}`))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "text/plain")
	req.Header.Set("Origin", h.origin)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			return err
		}
		return nil
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode == http.StatusForbidden {
		a.closed.Add(1)
	} else {
		h.problem("cross-site text/plain POST /v1/publish answered %d, want 403", resp.StatusCode)
	}
	pause(ctx, 200*time.Millisecond)
	return nil
}

// scrapeSeries reads the named series from the gateway's /metrics.
func scrapeSeries(ctx context.Context, c *http.Client, httpURL string, names []string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, httpURL+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]int64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if ok && want[name] {
			f, _ := strconv.ParseFloat(strings.TrimSpace(val), 64)
			out[name] = int64(f)
		}
	}
	return out, sc.Err()
}
