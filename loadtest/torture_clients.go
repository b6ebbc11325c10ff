package main

// The torture run's publishers and plain subscribers. Every publish goes
// through publishOne's bookkeeping: it holds its topic's gate from send to
// reply and records the reply in the ledger; every subscriber feeds an
// sview. Subscribers come in three kinds that resume differently after the
// run kills their connection: raw WebSocket ones resume with
// {"epoch","positions"} built from what they saw, SSE ones with
// last_event_id, and Go client ones through the client's own resume logic.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/client"
)

var (
	keyNotRecovered = []byte(`"recovered":false`)
	keyGen          = []byte("|g")
	keyTime         = []byte(`"time":"`)
)

// appendTorturePayload appends the data of a publish: the send time and
// the topic's generation.
func appendTorturePayload(dst []byte, sent time.Time, gen int64) []byte {
	dst = append(dst, '"')
	dst = append(dst, payloadMark...)
	dst = fmt.Appendf(dst, "%019d|g%d", sent.UnixNano(), gen)
	return append(dst, '"')
}

// appendTorturePublish appends a publish request (id < 0: none) with an
// optional key and msg_id.
func appendTorturePublish(dst []byte, id int64, topic, key, msgID string, sent time.Time, gen int64) []byte {
	dst = append(dst, `{"op":"publish"`...)
	if id >= 0 {
		dst = append(dst, `,"id":`...)
		dst = strconv.AppendInt(dst, id, 10)
	}
	dst = append(dst, `,"topic":"`...)
	dst = append(dst, topic...)
	dst = append(dst, '"')
	if key != "" {
		dst = append(dst, `,"key":"`...)
		dst = append(dst, key...)
		dst = append(dst, '"')
	}
	if msgID != "" {
		dst = append(dst, `,"msg_id":"`...)
		dst = append(dst, msgID...)
		dst = append(dst, '"')
	}
	dst = append(dst, `,"data":`...)
	dst = appendTorturePayload(dst, sent, gen)
	return append(dst, '}')
}

// pending is a publish awaiting its reply.
type pending struct {
	t    *tortureTopic
	gen  int64
	sent time.Time
}

// begin takes t's gate for one publish.
func begin(t *tortureTopic) pending {
	t.gate.RLock()
	return pending{t: t, gen: t.gen.Load(), sent: time.Now()}
}

// end records the reply to p (a published frame or HTTP body; nil: none)
// and releases the gate.
func (tr *torture) end(p pending, reply []byte) {
	defer p.t.gate.RUnlock()
	if reply == nil {
		return
	}
	part, ok1 := intAfter(reply, keyPartition)
	off, ok2 := intAfter(reply, keyOffset)
	if !ok1 || !ok2 {
		tr.pubErrors.Add(1)
		return
	}
	tr.l.published(p.t.name, p.gen, int(part), off, p.sent)
}

// pickTopic picks a topic to publish to.
func (tr *torture) pickTopic(rng *rand.Rand) *tortureTopic {
	return tr.pubTopics[rng.IntN(len(tr.pubTopics))]
}

func randKey(rng *rand.Rand) string {
	if rng.IntN(3) == 0 {
		return ""
	}
	return "k" + strconv.Itoa(rng.IntN(50))
}

// wsPublisher publishes pipelined over WebSocket until stop, with a window
// of outstanding publishes; now and then it is killed abruptly and comes
// back on a new connection.
func (tr *torture) wsPublisher(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	window := 8 + rng.IntN(56)
	nd := tr.gw.pick(rng)
	for !stopped(ctx, stop) {
		conn, _, err := dialGateway(ctx, nd.wsURL, false)
		if err != nil {
			tr.dialErrors.Add(1)
			pause(ctx, 100*time.Millisecond)
			continue
		}
		fifo := make(chan pending, window)
		readerDone := make(chan struct{})
		go func() { // exits when the connection ends
			defer close(readerDone)
			_ = readFrames(ctx, conn, func(l []byte) bool {
				if !isOp(l, opPublished) && !isOp(l, opError) {
					return true
				}
				var p pending
				select {
				case p = <-fifo:
				default: // a reply to nothing sent: never expected
					tr.badFrames.Add(1)
					return true
				}
				if isOp(l, opError) {
					tr.pubErrors.Add(1)
					tr.end(p, nil)
				} else {
					tr.end(p, l)
				}
				return true
			})
		}()
		killAt := time.Now().Add(tr.life(rng, 2, 15))
		var buf []byte
		var id int64
	send:
		for !stopped(ctx, stop) && time.Now().Before(killAt) {
			t := tr.pickTopic(rng)
			msgID := ""
			if rng.IntN(4) == 0 {
				msgID = "u" + strconv.FormatInt(tr.msgIDs.Add(1), 10)
			}
			p := begin(t)
			buf = appendTorturePublish(buf[:0], id, t.name, randKey(rng), msgID, p.sent, p.gen)
			id++
			select {
			case fifo <- p:
			case <-readerDone:
				p.t.gate.RUnlock()
				break send
			}
			if err := conn.Write(ctx, websocket.MessageText, buf); err != nil {
				break
			}
			// About 250 publishes a second, in bursts.
			if rng.IntN(8) == 0 {
				pause(ctx, time.Duration(rng.IntN(64))*time.Millisecond)
			}
		}
		if stopped(ctx, stop) {
			// Let the replies in flight arrive before leaving.
			deadline := time.Now().Add(10 * time.Second)
			for len(fifo) > 0 && time.Now().Before(deadline) {
				pause(ctx, 10*time.Millisecond)
			}
			conn.Close(websocket.StatusNormalClosure, "")
		} else {
			tr.kills.Add(1)
			conn.CloseNow()
		}
		<-readerDone
		for len(fifo) > 0 { // replies lost with the connection
			tr.end(<-fifo, nil)
		}
	}
}

// httpPublisher publishes with POST /v1/publish until stop.
func (tr *torture) httpPublisher(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	var buf []byte
	nd := tr.gw.pick(rng)
	for !stopped(ctx, stop) {
		t := tr.pickTopic(rng)
		msgID := ""
		if rng.IntN(3) == 0 {
			msgID = "h" + strconv.FormatInt(tr.msgIDs.Add(1), 10)
		}
		p := begin(t)
		buf = appendTorturePublish(buf[:0], -1, t.name, randKey(rng), msgID, p.sent, p.gen)
		body, status, err := tr.doAt(ctx, nd, http.MethodPost, "/v1/publish", buf)
		if err != nil || status != http.StatusOK {
			tr.pubErrors.Add(1)
			body = nil
		}
		tr.end(p, body)
		pause(ctx, time.Duration(rng.IntN(20))*time.Millisecond)
	}
}

// sameIDPublishers publish the same msg_id on two connections at once
// until stop: the first to the Block topic, which the stalled group keeps
// full, so that its append waits; the second after a batch of ordinary
// publishes in the same read, so that the second's wait on the first
// append holds whatever its batch queued for subscribers. The batch starts
// with a record of the quiet topic, whose subscribers get nothing else:
// they are certain to be waiting for this publisher's wakes.
func (tr *torture) sameIDPublishers(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	for !stopped(ctx, stop) {
		a, _, err := dialGateway(ctx, tr.gw.nodes[0].wsURL, false)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		b, br, closeB, err := tr.hostile.dialWS(ctx)
		if err != nil {
			a.CloseNow()
			pause(ctx, 100*time.Millisecond)
			continue
		}
		if _, _, err := readServerFrame(b, br); err != nil { // welcome
			a.CloseNow()
			closeB()
			continue
		}
		aDone := make(chan struct{})
		go func() { // drains a's replies; exits when a closes
			defer close(aDone)
			_ = readFrames(ctx, a, func([]byte) bool { return true })
		}()
		for n := 0; n < 20 && !stopped(ctx, stop); n++ {
			id := "s" + strconv.FormatInt(tr.msgIDs.Add(1), 10)
			sent := time.Now()
			// The block topic is outside the books: its publishes wait or
			// fail by design.
			if a.Write(ctx, websocket.MessageText, appendTorturePublish(nil, -1, tr.block.name, "", id, sent, 0)) != nil {
				break
			}
			pause(ctx, 20*time.Millisecond)
			var frames []byte
			var ps []pending
			for i := range 8 {
				t := tr.quiet
				if i > 0 {
					t = tr.plain[rng.IntN(len(tr.plain))]
				}
				p := begin(t)
				ps = append(ps, p)
				frames = wsFrame(frames, 1, true, appendTorturePublish(nil, int64(i), p.t.name, randKey(rng), "", p.sent, p.gen))
			}
			frames = wsFrame(frames, 1, true, appendTorturePublish(nil, 99, tr.block.name, "", id, sent, 0))
			if _, err := b.Write(frames); err != nil {
				for _, p := range ps {
					tr.end(p, nil)
				}
				break
			}
			got, ok := 0, true
			for got < len(ps)+1 {
				op, payload, err := readServerFrame(b, br)
				if err != nil {
					ok = false
					break
				}
				if op == 9 { // ping: answer it
					_, _ = b.Write(wsFrame(nil, 10, true, payload))
					continue
				}
				for _, l := range bytes.Split(payload, newline) {
					if len(l) == 0 || !(isOp(l, opPublished) || isOp(l, opError)) {
						continue
					}
					if got < len(ps) {
						if isOp(l, opError) {
							tr.end(ps[got], nil)
						} else {
							tr.end(ps[got], l)
						}
					}
					got++
				}
			}
			for ; got < len(ps); got++ { // replies lost with the connection
				tr.end(ps[got], nil)
			}
			if !ok {
				break
			}
			tr.sameIDRounds.Add(1)
		}
		a.CloseNow()
		closeB()
		<-aDone
	}
}

// readServerFrame reads one unmasked server frame (a whole message; the
// gateway does not fragment) and returns its opcode and payload.
func readServerFrame(c net.Conn, br *bufio.Reader) (byte, []byte, error) {
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	var h [2]byte
	if _, err := io.ReadFull(br, h[:]); err != nil {
		return 0, nil, err
	}
	n := int64(h[1] & 0x7f)
	switch n {
	case 126:
		var b [2]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = int64(b[0])<<8 | int64(b[1])
	case 127:
		var b [8]byte
		if _, err := io.ReadFull(br, b[:]); err != nil {
			return 0, nil, err
		}
		n = 0
		for _, x := range b {
			n = n<<8 | int64(x)
		}
	}
	if n > 16<<20 {
		return 0, nil, errors.New("frame too large")
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(br, payload); err != nil {
		return 0, nil, err
	}
	return h[0] & 0x0f, payload, nil
}

// rawSubscriber is a plain WebSocket subscriber of one pattern until stop:
// killed abruptly now and then and resumed from the positions it saw; a
// slow one sleeps per frame until stop; a pinging one pings.
func (tr *torture) rawSubscriber(ctx context.Context, rng *rand.Rand, v *sview, slow, ping, steady bool, stop <-chan struct{}, ready func()) {
	defer ready()
	epoch := ""
	nd := tr.gw.pick(rng)
	for ctx.Err() == nil {
		conn, welcome, _, err := dialWelcome(ctx, nd.wsURL, slow)
		if err != nil {
			tr.dialErrors.Add(1)
			pause(ctx, 100*time.Millisecond)
			continue
		}
		e := stringAfter(welcome, []byte(`"epoch":"`))
		req := map[string]any{"op": "subscribe", "id": "sub", "pattern": v.pattern}
		tr.deleteMu.RLock()
		if epoch == "" {
			req["from"] = "latest"
		} else {
			req["from"] = map[string]any{"epoch": epoch, "positions": tr.positions(v)}
		}
		epoch = e
		body, _ := json.Marshal(req)
		confirmed := make(chan struct{})
		var once sync.Once
		readerDone := make(chan struct{})
		go func() { // exits when the connection ends
			defer close(readerDone)
			lines := 0
			_ = readFramesThen(ctx, conn, func(l []byte) bool {
				lines++
				tr.plainLine(v, l, func() { once.Do(func() { v.confirmed(time.Now()); close(confirmed) }) })
				return true
			}, func() bool {
				if slow && !stopped(ctx, stop) {
					// About 300 messages a second.
					pause(ctx, time.Duration(lines)*3*time.Millisecond)
				}
				lines = 0
				return true
			})
		}()
		ok := conn.Write(ctx, websocket.MessageText, body) == nil
		if ok {
			select {
			case <-confirmed:
			case <-readerDone:
				ok = false
			case <-time.After(10 * time.Second):
				ok = false
			}
		}
		tr.deleteMu.RUnlock()
		if ok {
			life := tr.life(rng, 1, 12)
			if steady {
				life = 24 * time.Hour
			}
			tr.hold(ctx, conn, readerDone, life, ping, stop)
		}
		v.lost()
		if stopped(ctx, stop) && ok {
			// The final phase: stay connected and reading until released.
			// A connection the gateway ends meanwhile (a restart in
			// progress at stop) is resumed on a new one: the records owed
			// are still checked.
			v.setReading(true)
			v.confirmed(time.Now())
			ready()
			select {
			case <-ctx.Done():
				conn.CloseNow()
				<-readerDone
				return
			case <-readerDone:
				v.lost()
				conn.CloseNow()
				continue
			}
		}
		if ok {
			tr.kills.Add(1)
		}
		conn.CloseNow()
		<-readerDone
	}
}

// life is how long a client lives before it is killed: from min to max
// seconds, or a day with --without kills.
func (tr *torture) life(rng *rand.Rand, min, max int) time.Duration {
	if tr.cfg.without["kills"] {
		return 24 * time.Hour
	}
	return time.Duration(min)*time.Second + time.Duration(rng.Int64N(int64(max-min)*int64(time.Second)))
}

// hold keeps conn for life or until stop, pinging every 300 ms when ping.
func (tr *torture) hold(ctx context.Context, conn *websocket.Conn, readerDone <-chan struct{}, life time.Duration, ping bool, stop <-chan struct{}) {
	deadline := time.NewTimer(life)
	defer deadline.Stop()
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-deadline.C:
			return
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-readerDone:
			return
		case <-tick.C:
			if ping {
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = conn.Ping(pctx)
				cancel()
			}
		}
	}
}

// plainLine feeds one frame line of a plain subscription to v.
func (tr *torture) plainLine(v *sview, l []byte, confirmed func()) {
	switch {
	case isOp(l, opMessage):
		topic := stringAfter(l, keyTopic)
		part, _ := intAfter(l, keyPartition)
		off, _ := intAfter(l, keyOffset)
		gen, ok := intAfter(l, keyGen)
		if !ok {
			tr.badFrames.Add(1)
			return
		}
		var appended time.Time
		if ts := stringAfter(l, keyTime); ts != "" {
			appended, _ = time.Parse(time.RFC3339Nano, ts)
		}
		v.message(topic, gen, int(part), off, appended)
	case isOp(l, opGap):
		topic := stringAfter(l, keyTopic)
		part, _ := intAfter(l, keyPartition)
		from, _ := intAfter(l, keyFrom)
		to, _ := intAfter(l, keyTo)
		v.gap(topic, int(part), from, to)
	case isOp(l, opSubscribed):
		if bytes.Contains(l, keyNotRecovered) {
			v.unrecovered()
		}
		confirmed()
	case isOp(l, opTopicDeleted):
		v.topicDeleted(stringAfter(l, keyTopic))
	case isOp(l, opError):
		tr.subErrors.Add(1)
	}
}

// positions lists what v saw of every topic's current generation, for a
// resume; the caller holds deleteMu shared.
func (tr *torture) positions(v *sview) []map[string]any {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []map[string]any
	for k, p := range v.pos {
		if t := tr.l.topics[k.topic]; t != nil && t.gen.Load() == k.gen {
			hw := p.hw
			if g, ok := v.guess[tpart{k.topic, k.part}]; ok && g.gen == k.gen && hw == g.to-1 {
				// The gap may be another generation's (checkGuess): resume
				// from before it, and a message at its start settles it.
				hw = g.from - 1
			}
			out = append(out, map[string]any{"topic": k.topic, "partition": k.part, "offset": hw})
		}
	}
	return out
}

// sseSubscriber is a plain SSE subscriber of one pattern until stop,
// killed now and then and resumed with last_event_id.
func (tr *torture) sseSubscriber(ctx context.Context, rng *rand.Rand, v *sview, stop <-chan struct{}, ready func()) {
	defer ready()
	lastID := ""
	nd := tr.gw.pick(rng)
	for ctx.Err() == nil {
		q := url.Values{"pattern": {v.pattern}}
		if lastID != "" {
			q.Set("last_event_id", lastID)
		}
		rctx, cancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, nd.httpURL+"/v1/sse?"+q.Encode(), nil)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := tr.sse.Do(req)
		if err != nil || resp.StatusCode != http.StatusOK {
			if err == nil {
				resp.Body.Close()
			}
			cancel()
			tr.dialErrors.Add(1)
			pause(ctx, 100*time.Millisecond)
			continue
		}
		readerDone := make(chan struct{})
		go func() { // exits when the stream ends
			defer close(readerDone)
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(make([]byte, 64<<10), 4<<20)
			event, id := "", ""
			for sc.Scan() {
				line := sc.Bytes()
				switch {
				case len(line) == 0:
					event, id = "", ""
				case bytes.HasPrefix(line, []byte("event: ")):
					event = string(line[7:])
				case bytes.HasPrefix(line, []byte("id: ")):
					id = string(line[4:])
				case bytes.HasPrefix(line, []byte("data: ")):
					data := line[6:]
					if event == "subscribed" {
						if bytes.Contains(data, keyNotRecovered) {
							v.unrecovered()
						}
						v.confirmed(time.Now())
						continue
					}
					tr.plainLine(v, data, func() {})
					if event == "" && id != "" {
						lastID = id
					}
				}
			}
		}()
		life := time.NewTimer(tr.life(rng, 1, 10))
		select {
		case <-life.C:
		case <-stop:
		case <-readerDone:
		}
		life.Stop()
		if stopped(ctx, stop) {
			// The final phase, as rawSubscriber's: a stream the gateway
			// ends meanwhile is resumed from lastID.
			v.setReading(true)
			ready()
			select {
			case <-ctx.Done():
			case <-readerDone:
			}
		} else {
			tr.kills.Add(1)
		}
		v.lost()
		cancel()
		resp.Body.Close()
		<-readerDone
		if ctx.Err() != nil {
			return
		}
	}
}

// killableDialer remembers the connections it made, so that the run can
// cut them without a close frame.
type killableDialer struct {
	mu    sync.Mutex // guards following
	conns []net.Conn
}

func (d *killableDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		d.mu.Lock()
		d.conns = append(d.conns, c)
		d.mu.Unlock()
	}
	return c, err
}

// kill closes every connection made so far.
func (d *killableDialer) kill() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, c := range d.conns {
		c.Close()
	}
	d.conns = d.conns[:0]
}

// clientSubscriber subscribes through the Go client until stop, cutting
// its connection now and then so that the client resumes by itself.
func (tr *torture) clientSubscriber(ctx context.Context, rng *rand.Rand, v *sview, stop <-chan struct{}, ready func()) {
	defer ready()
	var subscribed atomic.Bool
	kd := &killableDialer{}
	hc := &http.Client{Transport: &http.Transport{DialContext: kd.dial}}
	defer hc.CloseIdleConnections()
	c, err := client.Dial(ctx, tr.gw.pick(rng).wsURL, &client.Options{
		HTTPClient: hc,
		Reconnect:  client.ReconnectPolicy{MinDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond},
		OnGap:      func(g client.Gap) { v.gap(g.Topic, g.Partition, g.From, g.To) },
		OnReset:    func(client.Reset) { tr.resets.Add(1) },
		OnState: func(s client.State, _ error) {
			switch s {
			case client.StateConnected:
				// After a reconnect (the first subscribe confirms below):
				// the subscription was resent from its positions.
				if subscribed.Load() {
					v.confirmed(time.Now())
				}
			case client.StateDisconnected:
				v.lost()
			}
		},
	})
	if err != nil {
		tr.dialErrors.Add(1)
		ready()
		return
	}
	defer c.Close()
	_, err = c.Subscribe(ctx, v.pattern, client.SubscribeOptions{}, func(m *client.Message) {
		gen, ok := intAfter(m.Data, keyGen)
		if !ok {
			tr.badFrames.Add(1)
			return
		}
		v.message(m.Topic, gen, m.Partition, m.Offset, m.Time)
	})
	if err != nil {
		tr.subErrors.Add(1)
		ready()
		return
	}
	v.confirmed(time.Now())
	subscribed.Store(true)
	for !stopped(ctx, stop) {
		pause(ctx, tr.life(rng, 1, 8))
		if !stopped(ctx, stop) {
			tr.kills.Add(1)
			kd.kill()
		}
	}
	ready()
	<-ctx.Done()
}

// stopped reports whether ctx ended or stop was closed.
func stopped(ctx context.Context, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return ctx.Err() != nil
	}
}

// do sends an HTTP request to the first gateway and returns the body and
// status.
func (tr *torture) do(ctx context.Context, method, path string, body []byte) ([]byte, int, error) {
	return tr.doAt(ctx, tr.gw.nodes[0], method, path, body)
}

// doAt sends an HTTP request to gateway nd and returns the body and status.
func (tr *torture) doAt(ctx context.Context, nd *tortureNode, method, path string, body []byte) ([]byte, int, error) {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	var r io.Reader
	if body != nil {
		r = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, nd.httpURL+path, r)
	if err != nil {
		return nil, 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return b, resp.StatusCode, err
}

// topicNames lists names for the report.
func topicNames(ts []*tortureTopic) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.name)
	}
	return strings.Join(s, ",")
}
