package main

// The hostile clients of `soak --hostile` against the newer surfaces:
// Server-Sent Events, presence, HTTP pull and WebSocket consumer groups.
// Each runs beside the soak's bystanders, in bounded loops, and the gateway
// must meet it with its bound:
//
//   - SSE non-readers: streams on "#" (every record of the soak) whose
//     socket is never read after the response header. The bystanders must
//     lose nothing; each stream is held 15 s, then dropped and opened again.
//   - forged Last-Event-ID: a 100 KiB id, a self-contained id naming more
//     than --sse-max-positions positions (under 64 KiB), and one naming a
//     pattern the stream does not request. Each must be 400 before the
//     stream starts (switchyard_sse_resumes_total{outcome="refused"}).
//   - presence churn: sessions subscribing and unsubscribing with presence
//     on a room as fast as they may, beside members of that room that stall
//     and then read slowly. The churners must meet rate_limited
//     (presence_join_rate), the members must never be closed (but by the
//     write timeout while this process is starved: presenceMember) and
//     must be sent a presence resync frame once announcements were
//     dropped for them.
//   - group-name spray: one-shot polls of ever new group names over HTTP
//     pull; past --max-pull-members-per-client they must be 429
//     too_many_subscriptions (pull_members_per_client).
//   - never-acking session: one WebSocket session joining many groups on
//     the soak's topics with max_in_flight 1000, reading every delivery and acking none.
//     Its group subscribes past --max-session-leases must be refused
//     too_many_subscriptions (session_leases), and it must stay connected.
//
// What a client sees that breaks a promise (a stream started on a forged
// id, a member closed, more pull members than the bound) is a problem of
// the run; the counters the gateway moves are in hostileEvidence.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Connections the clients below hold at once: SSE non-readers, one
// forged-resume client, presence members and churners, one spray client,
// one never-acking session.
const (
	hostileSSEStreams       = 24
	hostilePresenceMembers  = 2
	hostilePresenceChurners = 4
	hostileSurfaceConns     = hostileSSEStreams + 1 + hostilePresenceMembers + hostilePresenceChurners + 1 + 1 + stormWorkers + 1
)

// hostilePullMembersPerClient is the gateway's default
// --max-pull-members-per-client, which the --inprocess gateway keeps.
const hostilePullMembersPerClient = 64

// hostileLeaseGroups is how many groups the never-acking session joins:
// more than --max-session-leases leaves room for at the default queue.
const hostileLeaseGroups = 40

// hostileRoom is the presence room: a long name makes every announcement
// large, so the members' announcement bound is met within the burst.
var hostileRoom = "hostile.room." + strings.Repeat("r", 200)

// surfaceTally is what the clients below saw, for the end-of-run checks.
type surfaceTally struct {
	sseOpened       atomic.Int64 // SSE non-reader streams that started
	sseUnavailable  atomic.Int64 // SSE non-reader streams refused by the connect hook failing closed
	forgedRefused   atomic.Int64 // forged Last-Event-IDs answered 400
	presenceLimited atomic.Int64 // presence subscribes refused rate_limited
	presenceResyncs atomic.Int64 // presence resync frames members read
	// presenceStarvedEnds: slow members the gateway's write timeout or
	// keepalive ended while this process was starved (presenceMember)
	presenceStarvedEnds atomic.Int64
	pullRefused         atomic.Int64 // polls refused too_many_subscriptions
	leaseRefused        atomic.Int64 // group subscribes refused too_many_subscriptions
	leaseJoined         atomic.Int64 // group subscribes of the never-acking session answered subscribed
	leaseDeliveries     atomic.Int64 // deliveries the never-acking session read
	stormAttempts       atomic.Int64 // connects of the connect storm (hostile_hook.go)
	stormRefused        atomic.Int64 // of them, refused 429
	stormUnavailable    atomic.Int64 // of them, 503 after the slow hook's timeout
	probeConnects       atomic.Int64 // connects of another address beside it
	probeMaxMS          atomic.Int64 // the slowest of them
	probeUnavailable    atomic.Int64 // its 503s: a hook timeout on a loaded machine, tolerated once in a row

	mu       sync.Mutex // guards problems
	problems []string
}

// problem records a promise a hostile client saw broken.
func (h *hostile) problem(format string, args ...any) {
	t := &h.tally
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.problems) < problemsKept {
		t.problems = append(t.problems, fmt.Sprintf(format, args...))
	}
}

// problems returns what the hostile clients saw broken; with requireLimits,
// also every surface bound the clients never met.
func (h *hostile) problems(requireLimits bool) []string {
	t := &h.tally
	t.mu.Lock()
	out := append([]string(nil), t.problems...)
	t.mu.Unlock()
	if hk := hostileHook.Load(); hk != nil {
		if calls, admitted := hk.stormCalls.Load(), t.stormAttempts.Load()-t.stormRefused.Load(); calls > admitted {
			out = append(out, fmt.Sprintf("connect storm: %d hook calls for %d connects not refused: refused connects reached the hook", calls, admitted))
		}
	}
	if !requireLimits {
		return out
	}
	type check struct {
		n    int64
		what string
	}
	checks := []check{
		{t.sseOpened.Load(), "no SSE non-reader stream started"},
		{t.forgedRefused.Load(), "no forged Last-Event-ID was answered 400"},
		{t.presenceLimited.Load(), "no presence churner met rate_limited"},
		{t.presenceResyncs.Load(), "no slow presence member was sent a resync frame"},
		{t.pullRefused.Load(), "no group-name spray poll met too_many_subscriptions"},
		{t.leaseRefused.Load(), "the never-acking session's group subscribes never met too_many_subscriptions"},
	}
	if hostileHook.Load() != nil {
		checks = append(checks, check{t.stormRefused.Load(), "no connect of the connect storm was refused"},
			check{t.probeConnects.Load(), "no other address connected beside the connect storm"})
	}
	for _, c := range checks {
		if c.n == 0 {
			out = append(out, c.what)
		}
	}
	return out
}

// surfaceReport is a line for the report: what the clients saw.
func (h *hostile) surfaceReport() map[string]int64 {
	t := &h.tally
	m := map[string]int64{
		"client_sse_streams_opened":          t.sseOpened.Load(),
		"client_sse_streams_unavailable":     t.sseUnavailable.Load(),
		"client_forged_ids_refused":          t.forgedRefused.Load(),
		"client_presence_rate_limited":       t.presenceLimited.Load(),
		"client_presence_resyncs_read":       t.presenceResyncs.Load(),
		"client_presence_starved_ends":       t.presenceStarvedEnds.Load(),
		"client_pull_polls_refused":          t.pullRefused.Load(),
		"client_lease_groups_joined":         t.leaseJoined.Load(),
		"client_lease_subscribes_refused":    t.leaseRefused.Load(),
		"client_never_acked_deliveries_read": t.leaseDeliveries.Load(),
	}
	if hk := hostileHook.Load(); hk != nil {
		m["client_storm_connects"] = t.stormAttempts.Load()
		m["client_storm_refused"] = t.stormRefused.Load()
		m["client_storm_unavailable"] = t.stormUnavailable.Load()
		m["client_storm_hook_calls"] = hk.stormCalls.Load()
		m["client_probe_connects"] = t.probeConnects.Load()
		m["client_probe_slowest_connect_ms"] = t.probeMaxMS.Load()
		m["client_probe_unavailable"] = t.probeUnavailable.Load()
	}
	return m
}

// startSurfaces launches the clients above with loop (see start).
func (h *hostile) startSurfaces(loop func(*hostileActor, int, func(context.Context, *hostileActor) error)) {
	h.forged = forgedIDs()
	h.httpc = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 2}}
	loop(h.actor("sse_non_readers"), hostileSSEStreams, h.sseNonReader)
	loop(h.actor("forged_last_event_id"), 1, h.forgedResume)
	loop(h.actor("presence_slow_members"), hostilePresenceMembers, h.presenceMember)
	loop(h.actor("presence_churners"), hostilePresenceChurners, h.presenceChurner)
	loop(h.actor("group_name_spray"), 1, h.groupSpray)
	loop(h.actor("never_acking_groups"), 1, h.neverAcking)
	if hostileHook.Load() != nil {
		loop(h.actor("connect_storm"), stormWorkers, h.connectStorm)
		loop(h.actor("connect_probe"), 1, h.connectProbe)
	}
}

func (h *hostile) sseNonReader(ctx context.Context, a *hostileActor) error {
	c, done, err := h.dialRaw(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !writeAll(ctx, c, a, []byte("GET /v1/sse?pattern=%23 HTTP/1.1\r\nHost: "+h.host+"\r\nAccept: text/event-stream\r\n\r\n")) {
		return nil
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		if ctx.Err() == nil {
			return err
		}
		return nil
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		if resp.StatusCode == http.StatusServiceUnavailable && bytes.Contains(body, []byte(`"code":"unavailable"`)) &&
			bytes.Contains(body, []byte("authorization backend")) {
			// The connect hook outlived its timeout on a loaded machine
			// (the storm beside it is slow by design): the gateway fails
			// closed, as documented. Counted, not a violation.
			h.tally.sseUnavailable.Add(1)
		} else {
			h.problem("SSE stream on # answered %s %s", resp.Status, bytes.TrimSpace(body))
		}
		pause(ctx, time.Second)
		return nil
	}
	h.tally.sseOpened.Add(1)
	pause(ctx, 15*time.Second) // never read
	return nil
}

// forgedIDs are the Last-Event-IDs of forgedResume, for a stream on
// "hostile.resume": too long; under the byte bound but naming more
// positions than the default --sse-max-positions (4096); naming a pattern
// the stream does not request.
func forgedIDs() []string {
	var many bytes.Buffer
	many.WriteString(`{"e":"forged","s":[{"p":"hostile.resume","o":[`)
	for i := range 4200 {
		if i > 0 {
			many.WriteByte(',')
		}
		many.WriteString(`["a",0,0]`)
	}
	many.WriteString(`]}]}`)
	foreign := `{"e":"forged","s":[{"p":"other.#","o":[["other.t",0,5]]}]}`
	return []string{
		strings.Repeat("A", 100<<10),
		base64.RawURLEncoding.EncodeToString(many.Bytes()),
		base64.RawURLEncoding.EncodeToString([]byte(foreign)),
	}
}

var forgedKinds = []string{"100 KiB", "4200 positions", "foreign pattern"}

func (h *hostile) forgedResume(ctx context.Context, a *hostileActor) error {
	for i := 0; i < 300 && ctx.Err() == nil; i++ {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+h.host+"/v1/sse?pattern=hostile.resume", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Last-Event-ID", h.forged[i%len(h.forged)])
		resp, err := h.httpc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			return nil
		}
		if resp.StatusCode == http.StatusBadRequest && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
			h.tally.forgedRefused.Add(1)
			a.closed.Add(1)
		} else {
			h.problem("forged Last-Event-ID (%s) answered %s %s, want 400 before the stream starts",
				forgedKinds[i%len(forgedKinds)], resp.Status, resp.Header.Get("Content-Type"))
		}
		resp.Body.Close()
		pause(ctx, 100*time.Millisecond)
	}
	<-ctx.Done()
	return nil
}

func (h *hostile) groupSpray(ctx context.Context, a *hostileActor) error {
	base := time.Now().UnixNano()
	made, refused := 0, 0
	for i := 0; i < 3000 && refused < 300 && ctx.Err() == nil; i++ {
		u := fmt.Sprintf("http://%s/v1/groups/hostile-spray-%d-%d/poll", h.host, base, i)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(`{"pattern":"hostile.#","max":1}`))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := h.httpc.Do(req)
		if err != nil {
			if ctx.Err() == nil {
				return err
			}
			return nil
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusOK:
			made++
		case resp.StatusCode == http.StatusTooManyRequests && bytes.Contains(body, []byte(`too_many_subscriptions`)):
			refused++
			h.tally.pullRefused.Add(1)
			a.closed.Add(1)
		default:
			h.problem("group-name spray poll answered %s: %.200s", resp.Status, body)
			return nil
		}
		pause(ctx, 5*time.Millisecond)
	}
	if made > hostilePullMembersPerClient {
		h.problem("group-name spray made %d pull members, over the %d of one client", made, hostilePullMembersPerClient)
	}
	pause(ctx, time.Minute) // the members leave a minute after their last poll
	return nil
}

// rawWS is a hand-written WebSocket client that reads server frames and
// answers pings; writes are serialized.
type rawWS struct {
	c    net.Conn
	br   *bufio.Reader
	wmu  sync.Mutex // serializes writes
	part []byte     // a fragmented message so far
}

func (h *hostile) dialRawWS(ctx context.Context) (*rawWS, func(), error) {
	c, br, done, err := h.dialWS(ctx)
	if err != nil {
		return nil, nil, err
	}
	return &rawWS{c: c, br: br}, done, nil
}

// send writes one text message.
func (w *rawWS) send(ctx context.Context, a *hostileActor, msg string) bool {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	return writeAll(ctx, w.c, a, wsFrame(nil, 1, true, []byte(msg)))
}

// errGatewayClose is a close frame from the gateway.
type errGatewayClose struct {
	code   int
	reason string
}

func (e errGatewayClose) Error() string { return fmt.Sprintf("closed %d %q", e.code, e.reason) }

// next returns the next text message, answering pings on the way. It
// returns errGatewayClose for a close frame.
func (w *rawWS) next(ctx context.Context, a *hostileActor) ([]byte, error) {
	for range 1 << 20 { // frames of one message, pings and pongs
		op, fin, payload, err := readFrame(w.br, 1<<20)
		if err != nil {
			return nil, err
		}
		switch op {
		case 8:
			e := errGatewayClose{}
			if len(payload) >= 2 {
				e.code, e.reason = int(binary.BigEndian.Uint16(payload)), string(payload[2:])
			}
			return nil, e
		case 9:
			w.wmu.Lock()
			writeAll(ctx, w.c, a, wsFrame(nil, 10, true, payload))
			w.wmu.Unlock()
		case 10:
		case 0, 1, 2:
			w.part = append(w.part, payload...)
			if fin {
				msg := w.part
				w.part = nil
				return msg, nil
			}
		}
	}
	return nil, errors.New("too many frames in one message")
}

// readFrame reads one unmasked server frame of at most limit bytes.
func readFrame(br *bufio.Reader, limit int) (op byte, fin bool, payload []byte, err error) {
	var hdr [2]byte
	if _, err = io.ReadFull(br, hdr[:]); err != nil {
		return 0, false, nil, err
	}
	op, fin = hdr[0]&0x0f, hdr[0]&0x80 != 0
	n := uint64(hdr[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(br, b[:]); err != nil {
			return 0, false, nil, err
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(br, b[:]); err != nil {
			return 0, false, nil, err
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if hdr[1]&0x80 != 0 || n > uint64(limit) {
		return 0, false, nil, fmt.Errorf("server frame masked or of %d bytes", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(br, payload)
	return op, fin, payload, err
}

// closedBy reports whether err is the gateway ending the connection (not
// this client, nor the run's end).
func closedBy(ctx context.Context, err error) bool {
	var ne net.Error
	return ctx.Err() == nil && err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// presenceMember joins the room, reads nothing for presenceStall, then
// reads about 160 KB/s, looking for the resync frame. The gateway must
// never close it, with one exception: a write to it that outlives the
// gateway's write timeout (10 s) ends its session without a close frame,
// as it ends any client's that stops reading, and the stall counts toward
// that write's time. When this process was starved of CPU meanwhile
// (hostile.starved) the member did not read for that long, and such an
// end that the gateway counts as write_timeout or keepalive is counted
// (presenceStarvedEnds), not a broken promise. Any other end is one, told
// with what the member read and the gateway's count of its reasons
// (memberEnd).
func (h *hostile) presenceMember(ctx context.Context, a *hostileActor) error {
	w, done, err := h.dialRawWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	if !w.send(ctx, a, `{"op":"subscribe","id":1,"pattern":"`+hostileRoom+`","presence":true}`) {
		h.problem("slow presence member: the gateway closed it while it subscribed")
		return nil
	}
	joined := time.Now()
	pause(ctx, presenceStall) // stalled: the announcements pile up
	rd := memberReads{joined: joined, resumed: time.Now()}
	budget := 0
	for range 1_000_000 { // frames; the run's end comes first
		if ctx.Err() != nil {
			return nil
		}
		_ = w.c.SetReadDeadline(time.Now().Add(time.Minute))
		msg, err := w.next(ctx, a)
		if err != nil {
			if closedBy(ctx, err) {
				a.closed.Add(1)
				end, bounded := h.memberEnd(ctx, err, &rd)
				if now := time.Now(); bounded && h.starved != nil && h.starved(now.Add(-presenceStarvedWindow), now) {
					h.tally.presenceStarvedEnds.Add(1)
				} else {
					h.problem("slow presence member was closed: %s", end)
				}
			}
			return nil
		}
		rd.read(len(msg))
		if bytes.Contains(msg, []byte(`"resync":true`)) {
			h.tally.presenceResyncs.Add(1)
		}
		if budget += len(msg); budget >= 8<<10 {
			budget = 0
			pause(ctx, 50*time.Millisecond)
		}
	}
	return nil
}

// presenceStall is how long a slow presence member reads nothing after
// it joined: long enough for the churners' first burst to pass its
// announcement bound, and well under the gateway's write timeout (10 s),
// which a write blocked since the stall began must not reach once the
// member reads again.
const presenceStall = 3 * time.Second

// presenceStarvedWindow is how far back a starved process excuses a slow
// member's end by the gateway's write timeout or keepalive: the write
// timeout, the stall and some margin.
const presenceStarvedWindow = 15 * time.Second

// memberReads is what a slow presence member read, for the account of
// its end.
type memberReads struct {
	joined, resumed, last time.Time // subscribed, done stalling, the last message
	msgs, bytes           int64
	slowest               time.Duration // the longest wait for a message
}

func (r *memberReads) read(n int) {
	now := time.Now()
	prev := r.last
	if prev.IsZero() {
		prev = r.resumed
	}
	r.slowest = max(r.slowest, now.Sub(prev))
	r.last, r.msgs, r.bytes = now, r.msgs+1, r.bytes+int64(n)
}

// presenceEndSeries are the gateway's counts of presence members' ends,
// by reason (router/presence_churn.go).
var presenceEndSeries = func() []string {
	var out []string
	for _, r := range []string{"peer", "closed", "write_timeout", "keepalive", "slow_consumer", "control_overflow", "message_timeout"} {
		out = append(out, `switchyard_presence_member_sessions_ended_total{reason="`+r+`"}`)
	}
	return out
}()

// memberEnd describes how a slow presence member's connection ended: the
// close frame's code and reason when there was one; otherwise where the
// stream stopped (in the middle of a frame: the gateway gave up a write),
// what the member had read and when, and the reasons the gateway counts
// for its presence members' ends so far (a write timeout or a keepalive
// ends a session without a close frame).
//
// bounded reports an end without a close frame while the gateway counts
// a presence member ended by its write timeout or keepalive.
func (h *hostile) memberEnd(ctx context.Context, err error, r *memberReads) (desc string, bounded bool) {
	var gc errGatewayClose
	if errors.As(err, &gc) {
		return gc.Error(), false
	}
	now := time.Now()
	where := "at a frame boundary"
	if errors.Is(err, io.ErrUnexpectedEOF) {
		where = "in the middle of a frame"
	}
	last := "none"
	if !r.last.IsZero() {
		last = now.Sub(r.last).Round(time.Millisecond).String() + " before"
	}
	out := fmt.Sprintf("%v, no close frame, %s; %v after it joined, %v after its stall; read %d messages (%d bytes), the last %s, the longest wait %v",
		err, where, now.Sub(r.joined).Round(time.Millisecond), now.Sub(r.resumed).Round(time.Millisecond),
		r.msgs, r.bytes, last, r.slowest.Round(time.Millisecond))
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var ends map[string]int64
	var serr error
	for range 10 { // the gateway counts the end once its session is torn down
		if ends, serr = scrapeSeries(sctx, h.httpc, "http://"+h.host, presenceEndSeries); serr != nil {
			break
		}
		var bounded int64
		for _, name := range presenceEndSeries[2:] { // the gateway's own reasons
			bounded += ends[name]
		}
		if bounded > 0 {
			break
		}
		pause(sctx, 200*time.Millisecond)
	}
	if serr != nil {
		return out + fmt.Sprintf("; the gateway's counts of presence ends unread: %v", serr), false
	}
	var counts []string
	for _, name := range presenceEndSeries {
		if n := ends[name]; n > 0 {
			_, reason, _ := strings.Cut(name, `reason="`)
			counts = append(counts, fmt.Sprintf("%s %d", strings.TrimSuffix(reason, `"}`), n))
		}
	}
	bounded = ends[presenceEndSeries[2]]+ends[presenceEndSeries[3]] > 0 // write_timeout, keepalive
	return out + "; presence members' sessions the gateway saw end, by reason: " + strings.Join(counts, ", "), bounded
}

// presenceChurner subscribes and unsubscribes with presence on the room,
// up to 20,000 times per connection at about 100 cycles a second (ten
// times the default join rate), counting
// the rate_limited refusals it reads.
func (h *hostile) presenceChurner(ctx context.Context, a *hostileActor) error {
	w, done, err := h.dialRawWS(ctx)
	if err != nil {
		return err
	}
	var rd sync.WaitGroup
	defer rd.Wait()
	defer done()
	rd.Go(func() { // ends when done closes the connection
		for {
			msg, err := w.next(ctx, a)
			if err != nil {
				if closedBy(ctx, err) {
					a.closed.Add(1) // the churner pays for its churn
				}
				return
			}
			if bytes.Contains(msg, []byte(`"rate_limited"`)) {
				h.tally.presenceLimited.Add(1)
			}
		}
	})
	sub := `{"op":"subscribe","pattern":"` + hostileRoom + `","presence":true}`
	unsub := `{"op":"unsubscribe","pattern":"` + hostileRoom + `"}`
	for i := 0; i < 20000 && ctx.Err() == nil; i++ {
		if !w.send(ctx, a, sub) || !w.send(ctx, a, unsub) {
			return nil
		}
		if i%2 == 1 {
			pause(ctx, 20*time.Millisecond)
		}
	}
	<-ctx.Done()
	return nil
}

// neverAcking joins hostileLeaseGroups groups on the soak's topics
// ("lt.<run>.soak.t<i>", runner.go) with max_in_flight 1000 in one session
// and reads every delivery without acking one.
func (h *hostile) neverAcking(ctx context.Context, a *hostileActor) error {
	w, done, err := h.dialRawWS(ctx)
	if err != nil {
		return err
	}
	defer done()
	for i := range hostileLeaseGroups { // the same groups again after a reconnect
		if !w.send(ctx, a, fmt.Sprintf(`{"op":"subscribe","id":%d,"pattern":"lt.*.soak.*","group":"hostile-lease-%d","max_in_flight":1000}`, i+1, i)) {
			h.problem("never-acking session: the gateway closed it while it subscribed")
			return nil
		}
	}
	var f struct {
		Op   string `json:"op"`
		Code string `json:"code"`
	}
	for range 1_000_000 { // messages; the run's end comes first
		if ctx.Err() != nil {
			return nil
		}
		_ = w.c.SetReadDeadline(time.Now().Add(time.Minute))
		msg, err := w.next(ctx, a)
		if err != nil {
			if closedBy(ctx, err) {
				a.closed.Add(1)
				h.problem("never-acking session was closed: %v", err)
			}
			return nil
		}
		for line := range bytes.Lines(msg) { // a message may carry several frames, a line each
			f.Op, f.Code = "", ""
			if json.Unmarshal(line, &f) != nil {
				h.problem("never-acking session read a frame that is not JSON: %.100q", line)
				return nil
			}
			switch {
			case f.Op == "subscribed":
				h.tally.leaseJoined.Add(1)
			case f.Op == "error" && f.Code == "too_many_subscriptions":
				h.tally.leaseRefused.Add(1)
			case f.Op == "error":
				h.problem("never-acking session: %.200s", line)
			case f.Op == "message":
				h.tally.leaseDeliveries.Add(1)
			}
		}
	}
	return nil
}
