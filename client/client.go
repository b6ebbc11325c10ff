package client

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/internal/wire"
)

// Client is a connection to a Switchyard gateway that reconnects by itself.
// It is safe for concurrent use by multiple goroutines. Create it with Dial
// and stop it with Close.
type Client struct {
	url  string
	opts Options
	log  *slog.Logger
	disp dispatcher

	ctx       context.Context // canceled by Close; bounds the reader's work
	cancel    context.CancelFunc
	wg        sync.WaitGroup // reader and dispatcher
	closeOnce sync.Once

	nextID     atomic.Uint64
	refreshing atomic.Bool // a refresh_required is being answered
	// deltaFailedOn is the connection a delta failed on (delta.go): the
	// reader handles nothing more of it.
	deltaFailedOn atomic.Pointer[websocket.Conn]

	// Backpressure (backpressure.go).
	waiters  atomic.Int32  // requests waited on whose reply is not read yet
	callWake chan struct{} // capacity 1: a request started waiting
	stalls   atomic.Uint64 // waits of the reader for room, ever
	stalled  atomic.Bool   // the reader is waiting for room

	mu      sync.Mutex // guards following
	conn    *websocket.Conn
	ready   chan struct{} // closed while conn is set or the client stopped
	welcome Welcome
	token   string // the static token, updated by Refresh
	pending map[uint64]*call
	subs    map[subKey]*Subscription
	stopped error // set once the client stops; wraps ErrClosed
}

type subKey struct{ pattern, group string }

// call is a request waiting for its reply.
type call struct {
	conn *websocket.Conn
	done chan reply // buffered; nil when fn is set
	// fn, when set, receives the reply on the reader goroutine instead.
	fn func(*inFrame, error)
	// onOK runs on the reader goroutine when the request succeeded, before
	// any later frame is read.
	onOK func(*inFrame)
}

type reply struct {
	f   *inFrame
	err error
}

// Dial connects to the gateway at rawURL and waits for its welcome. rawURL
// may be a ws://, wss://, http:// or https:// URL; without a path,
// /v1/ws is used. Dial starts the client's reader and dispatcher
// goroutines; Close stops them. ctx bounds only the first connection.
func Dial(ctx context.Context, rawURL string, opts *Options) (*Client, error) {
	o := opts.withDefaults()
	u, err := wsURL(rawURL)
	if err != nil {
		return nil, err
	}
	c := &Client{
		url:     u,
		token:   o.Token,
		opts:    o,
		log:     o.Logger,
		ready:   make(chan struct{}),
		pending: make(map[uint64]*call),
		subs:    make(map[subKey]*Subscription),
	}
	c.disp.wake = make(chan struct{}, 1)
	c.callWake = make(chan struct{}, 1)
	conn, w, err := c.connect(ctx)
	if err != nil {
		return nil, err
	}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	c.mu.Lock()
	c.conn, c.welcome = conn, w
	close(c.ready)
	c.mu.Unlock()
	c.wg.Add(2)
	go c.run(conn)
	go c.dispatch()
	return c, nil
}

func wsURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", fmt.Errorf("client: bad url: %w", err)
	}
	switch u.Scheme {
	case "ws", "wss":
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	default:
		return "", fmt.Errorf("client: bad url %q: scheme must be ws, wss, http or https", raw)
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/ws"
	}
	return u.String(), nil
}

// connect opens one connection and reads its welcome.
func (c *Client) connect(ctx context.Context) (*websocket.Conn, Welcome, error) {
	ctx, cancel := context.WithTimeout(ctx, c.opts.RequestTimeout)
	defer cancel()
	token, err := c.currentToken(ctx)
	if err != nil {
		return nil, Welcome{}, err
	}
	u, _ := wsURL(c.url) // c.url was checked by Dial
	header := c.opts.Header
	if token != "" {
		// In the handshake's header, never the URL, where proxies and
		// access logs keep it.
		header = header.Clone()
		if header == nil {
			header = http.Header{}
		}
		header.Set("Authorization", "Bearer "+token)
	}
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
		HTTPClient: c.opts.HTTPClient,
		HTTPHeader: header,
	})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, Welcome{}, httpError(resp)
		}
		return nil, Welcome{}, fmt.Errorf("client: dial: %w", err)
	}
	// The gateway batches queued frames into one; trust it for their size.
	conn.SetReadLimit(-1)
	typ, data, err := conn.Read(ctx)
	if err != nil {
		conn.CloseNow()
		return nil, Welcome{}, fmt.Errorf("client: reading welcome: %w", err)
	}
	line, _, _ := bytes.Cut(data, []byte{'\n'})
	var f inFrame
	if typ != websocket.MessageText || json.Unmarshal(line, &f) != nil || f.Op != wire.OpWelcome {
		conn.CloseNow()
		if f.Op == wire.OpError {
			return nil, Welcome{}, f.err()
		}
		return nil, Welcome{}, fmt.Errorf("%w: first frame is not a welcome: %.100q", ErrProtocol, data)
	}
	w := Welcome{Session: f.Session, Epoch: f.Epoch}
	if f.Limits != nil {
		w.Limits = *f.Limits
	}
	return conn, w, nil
}

// httpError turns a refused handshake into an *Error when the body is one.
func httpError(resp *http.Response) error {
	var e struct{ Code, Message string }
	if resp.Body != nil {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		_ = json.Unmarshal(b, &e)
	}
	if e.Code == "" {
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			e.Code = wire.CodeUnauthorized
		case http.StatusForbidden:
			e.Code = CodeForbidden
		default:
			return fmt.Errorf("%w: the server answered the WebSocket handshake with HTTP %d, not with a Switchyard welcome", ErrNotGateway, resp.StatusCode)
		}
	}
	return &Error{Code: e.Code, Message: e.Message}
}

// Welcome returns the welcome of the current (or last) connection.
func (c *Client) Welcome() Welcome {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.welcome
}

// Close stops the client: it closes the connection, ends every
// subscription (closing the C of channel subscriptions) and waits for the
// client's goroutines, including a running handler, to return. Calls in
// progress fail with ErrClosed. Close must not be called from a handler or
// callback. Calling Close again is harmless.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.stop(ErrClosed)
		c.mu.Lock()
		conn := c.conn
		c.mu.Unlock()
		if conn != nil {
			// A normal closure lets the gateway release the session at once;
			// the reader is still running to receive the peer's close frame.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			go func() { // exits at the timeout or when Close returns
				<-ctx.Done()
				conn.CloseNow()
			}()
			_ = conn.Close(websocket.StatusNormalClosure, "")
			cancel()
		}
		c.cancel()
	})
	c.wg.Wait()
	return nil
}

// stop marks the client stopped with err and fails every waiting request.
func (c *Client) stop(err error) {
	c.mu.Lock()
	if c.stopped != nil {
		c.mu.Unlock()
		return
	}
	c.stopped = err
	if c.conn == nil {
		close(c.ready)
	}
	calls := c.pending
	c.pending = make(map[uint64]*call)
	for _, cl := range calls {
		c.replied(cl)
	}
	c.mu.Unlock()
	for _, cl := range calls {
		cl.finish(nil, err)
	}
}

func (cl *call) finish(f *inFrame, err error) {
	if cl.fn != nil {
		cl.fn(f, err)
		return
	}
	cl.done <- reply{f, err}
}

// run is the reader goroutine: it reads the connection and, when it drops,
// redials. It returns when the client is closed, or after a connection loss
// with reconnection disabled.
func (c *Client) run(conn *websocket.Conn) {
	defer c.wg.Done()
	for {
		err := c.readConn(conn)
		if c.lost(conn, err) {
			return // closed
		}
		if c.opts.Reconnect.Disabled {
			c.stop(fmt.Errorf("%w: connection lost: %v", ErrClosed, err))
			c.disp.push(event{kind: evExit})
			return
		}
		if conn = c.redial(); conn == nil {
			return
		}
	}
}

// readLoop reads frames from conn until it fails. The read buffer is reused
// for every frame.
func (c *Client) readLoop(conn *websocket.Conn) error {
	var buf bytes.Buffer
	for {
		typ, r, err := conn.Reader(c.ctx)
		if err != nil {
			return err
		}
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			return err
		}
		if typ != websocket.MessageText {
			continue
		}
		data := buf.Bytes()
		for len(data) > 0 {
			var line []byte
			line, data, _ = bytes.Cut(data, []byte{'\n'})
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			var f inFrame
			if err := json.Unmarshal(line, &f); err != nil {
				c.log.Warn("switchyard: unreadable frame", "err", err, "frame", truncate(line, 200))
				continue
			}
			c.handle(&f)
			if c.deltaFailedOn.CompareAndSwap(conn, nil) {
				// The rest would advance positions past the failed
				// delta, which the resume must ask for again.
				return fmt.Errorf("%w: a delta message did not apply", ErrProtocol)
			}
		}
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}

func (c *Client) handle(f *inFrame) {
	switch f.Op {
	case wire.OpMessage:
		c.onMessage(f)
	case wire.OpGap:
		c.onGap(f)
	case wire.OpTopicDeleted:
		if s := c.lookup(f.Pattern, ""); s != nil {
			s.forgetTopic(f.Topic)
		}
		c.disp.push(event{kind: evTopicDeleted, deleted: &TopicDeleted{Pattern: f.Pattern, Topic: f.Topic}})
	case wire.OpWelcome:
		// Only the first frame of a connection; connect reads it.
	case wire.OpRefreshRequired:
		c.onRefreshRequired()
	case wire.OpJoin, wire.OpLeave:
		c.onPresence(f)
	case wire.OpPresence:
		if id, ok := parseID(f.ID); ok {
			c.complete(id, f, nil)
		} else {
			c.onPresenceResync(f.Topic) // the gateway dropped announcements
		}
	case wire.OpUnsubscribed:
		if len(f.ID) == 0 && f.Reason != "" {
			c.onRevoked(f)
			return
		}
		if id, ok := parseID(f.ID); ok {
			c.complete(id, f, nil)
		}
	case wire.OpError:
		e := f.err()
		if id, ok := parseID(f.ID); ok && c.complete(id, nil, e) {
			return
		}
		c.disp.push(event{kind: evError, err: e})
	default:
		if id, ok := parseID(f.ID); ok {
			c.complete(id, f, nil)
		}
	}
}

func parseID(raw json.RawMessage) (uint64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	id, err := strconv.ParseUint(strings.Trim(string(raw), `"`), 10, 64)
	return id, err == nil
}

// complete hands a reply to the request waiting for it.
func (c *Client) complete(id uint64, f *inFrame, err error) bool {
	c.mu.Lock()
	cl := c.pending[id]
	if cl != nil {
		delete(c.pending, id)
		c.replied(cl)
	}
	c.mu.Unlock()
	if cl == nil {
		return false
	}
	if err == nil && cl.onOK != nil {
		cl.onOK(f)
	}
	cl.finish(f, err)
	return true
}

func (c *Client) lookup(pattern, group string) *Subscription {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.subs[subKey{pattern, group}]
}

func (c *Client) onMessage(f *inFrame) {
	s := c.lookup(f.Pattern, f.Group)
	if s == nil {
		return // unsubscribed meanwhile
	}
	if s.opts.Delta && s.group == "" {
		// Before anything may drop it: the gateway's next delta is
		// against this payload.
		if err := s.applyDelta(f); err != nil {
			c.deltaFailed(err)
			return
		}
	}
	m := f.message()
	m.sub = s
	room := s.pending.Load() < int64(s.opts.MaxPending)
	if s.group == "" {
		room = c.roomFor(s)
	}
	if !room {
		if s.isEnded() {
			return // unsubscribed while the reader waited
		}
		if s.group == "" {
			s.noteDrop(f.Topic, f.Partition, f.Offset)
			if s.pending.Load() == 0 {
				// The dispatcher drained the subscription meanwhile and
				// found no drop to report: report this one now.
				c.pushLocalGaps(s)
			}
		} else {
			c.sendAsync(ackReq{Op: wire.OpNack, Group: f.Group, Topic: f.Topic, Partition: f.Partition,
				Offset: f.Offset, Error: "client queue full"})
		}
		return
	}
	if s.group == "" && !s.advance(f.Topic, f.Partition, f.Offset) {
		s.dups.Add(1)
		return // already delivered
	}
	c.pushLocalGaps(s)
	s.pending.Add(1)
	c.disp.push(event{kind: evMessage, sub: s, msg: m})
}

// pushLocalGaps queues the drops s holds as gap events.
func (c *Client) pushLocalGaps(s *Subscription) {
	for _, g := range s.takeLocalGaps() {
		c.disp.push(event{kind: evGap, sub: s, gap: &g})
	}
}

func (c *Client) onGap(f *inFrame) {
	s := c.lookup(f.Pattern, f.Group)
	if s == nil {
		return
	}
	s.forgetBase(f.Topic, f.Partition) // the next message is full
	c.disp.push(event{kind: evGap, sub: s, gap: f.gap()})
}

// requestContext bounds ctx by RequestTimeout unless it ends earlier.
func (c *Client) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if d, ok := ctx.Deadline(); ok && time.Until(d) <= c.opts.RequestTimeout {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

// register waits for a connection and registers a call on it. prepare, if
// set, runs under c.mu just before; an error from it is returned.
func (c *Client) register(ctx context.Context, prepare func() error, onOK func(*inFrame)) (*websocket.Conn, uint64, *call, error) {
	for {
		c.mu.Lock()
		if c.stopped != nil {
			err := c.stopped
			c.mu.Unlock()
			return nil, 0, nil, err
		}
		if c.conn == nil {
			ready := c.ready
			c.mu.Unlock()
			select {
			case <-ready:
				continue
			case <-ctx.Done():
				return nil, 0, nil, fmt.Errorf("client: waiting for a connection: %w", ctx.Err())
			}
		}
		if prepare != nil {
			if err := prepare(); err != nil {
				c.mu.Unlock()
				return nil, 0, nil, err
			}
		}
		id := c.nextID.Add(1)
		cl := &call{conn: c.conn, done: make(chan reply, 1), onOK: onOK}
		c.pending[id] = cl
		c.callWaiting()
		c.mu.Unlock()
		return cl.conn, id, cl, nil
	}
}

func (c *Client) unregister(id uint64) {
	c.mu.Lock()
	if cl := c.pending[id]; cl != nil {
		delete(c.pending, id)
		c.replied(cl)
	}
	c.mu.Unlock()
}

// roundTrip sends the request build makes for its id and waits for the
// reply. An error frame comes back as *Error.
func (c *Client) roundTrip(ctx context.Context, build func(id uint64) any, prepare func() error, onOK func(*inFrame)) (*inFrame, error) {
	ctx, cancel := c.requestContext(ctx)
	defer cancel()
	conn, id, cl, err := c.register(ctx, prepare, onOK)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(build(id))
	if err != nil {
		c.unregister(id)
		return nil, fmt.Errorf("client: encoding request: %w", err)
	}
	if err := conn.Write(ctx, websocket.MessageText, b); err != nil {
		c.unregister(id)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	}
	select {
	case r := <-cl.done:
		return r.f, r.err
	case <-ctx.Done():
		c.unregister(id)
		return nil, ctx.Err()
	}
}

// sendAsync writes a request that expects no reply, if connected.
func (c *Client) sendAsync(v any) {
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn == nil {
		return
	}
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
	defer cancel()
	_ = conn.Write(ctx, websocket.MessageText, b) // a broken connection is seen by the reader
}

// Publish appends data, encoded as JSON, to topic and returns where it was
// stored. data may be a json.RawMessage holding JSON already. Errors from
// the gateway are *Error (for example code "invalid_topic"); a publish
// whose connection dropped before the reply fails with ErrConnectionLost
// and may or may not have been stored.
//
// Publish encodes every value as JSON, a []byte too: encoding/json makes
// it a base64 string, so the record holds the JSON string "AAEC", not the
// bytes. To store bytes as they are, use PublishBytes.
func (c *Client) Publish(ctx context.Context, topic string, data any, opts ...PublishOption) (PublishResult, error) {
	raw, ok := data.(json.RawMessage)
	if !ok {
		b, err := json.Marshal(data)
		if err != nil {
			return PublishResult{}, fmt.Errorf("client: encoding data: %w", err)
		}
		raw = b
	}
	return c.publish(ctx, publishReq{Op: wire.OpPublish, Topic: topic, Data: raw}, opts)
}

// publish sends req with opts applied and returns its reply.
func (c *Client) publish(ctx context.Context, req publishReq, opts []PublishOption) (PublishResult, error) {
	for _, o := range opts {
		o(&req)
	}
	f, err := c.roundTrip(ctx, func(id uint64) any { req.ID = id; return &req }, nil, nil)
	if err != nil {
		return PublishResult{}, err
	}
	return f.published(), nil
}

// PublishBytes appends payload to topic as bytes, not as JSON: it is sent
// with the protocol's "encoding":"base64" and stored as it is. Readers
// see a payload that is valid JSON as JSON data, and any other as base64
// with Message.Encoding "base64" (Message.Payload returns the bytes in
// both cases). Errors are those of Publish.
func (c *Client) PublishBytes(ctx context.Context, topic string, payload []byte, opts ...PublishOption) (PublishResult, error) {
	return c.publish(ctx, bytesPublish(topic, payload), opts)
}

// bytesPublish is the publish request of PublishBytes.
func bytesPublish(topic string, payload []byte) publishReq {
	b, _ := json.Marshal(base64.StdEncoding.EncodeToString(payload)) // a string always encodes
	return publishReq{Op: wire.OpPublish, Topic: topic, Data: b, Encoding: wire.EncodingBase64}
}

// Subscribe subscribes to pattern and calls handler, on the client's
// dispatcher goroutine, for every delivery, in order per (topic,
// partition). It returns once the gateway confirmed the subscription.
// Errors from the gateway are *Error (for example "invalid_pattern").
//
// With opts.Group set, the handler must settle each delivery with Ack or
// Nack (it may do so later, from another goroutine); an unsettled record
// is redelivered after the gateway's ack timeout.
func (c *Client) Subscribe(ctx context.Context, pattern string, opts SubscribeOptions, handler func(*Message)) (*Subscription, error) {
	if handler == nil {
		return nil, errors.New("client: Subscribe needs a handler")
	}
	return c.subscribe(ctx, pattern, opts, handler)
}

// SubscribeChan is Subscribe with deliveries sent to the returned
// Subscription's C, which holds up to opts.Buffer messages and is closed
// when the subscription ends. A full C holds up the client's other
// subscriptions, and then the reading of the connection (see
// SubscribeOptions.MaxPending), so read it promptly. For group subscriptions, a
// redelivery is suppressed only if the earlier delivery was acked before
// the redelivery reached C.
func (c *Client) SubscribeChan(ctx context.Context, pattern string, opts SubscribeOptions) (*Subscription, error) {
	return c.subscribe(ctx, pattern, opts, nil)
}

func (c *Client) subscribe(ctx context.Context, pattern string, opts SubscribeOptions, handler func(*Message)) (*Subscription, error) {
	s := newSubscription(c, pattern, opts.withDefaults(), handler)
	key := subKey{pattern, opts.Group}
	prepare := func() error {
		if c.subs[key] != nil {
			return ErrAlreadySubscribed
		}
		c.subs[key] = s
		s.setEpoch(c.welcome.Epoch)
		return nil
	}
	_, err := c.roundTrip(ctx, func(id uint64) any { return s.request(id, false, "") }, prepare, func(*inFrame) { s.activate() })
	if err != nil {
		c.removeSub(s)
		return nil, err
	}
	return s, nil
}
