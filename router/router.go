// Package router is the Switchyard gateway: it admits client sessions over
// WebSocket, Server-Sent Events and MQTT (mqtt*.go), answers the ops of the wire protocol,
// appends publishes to the engine's log, fans the log's live tail out
// through the topic trie to matching sessions, drives consumer groups, and
// serves the HTTP API, metrics and the dashboard.
//
// # Fan-out
//
// The engine announces every append (from this node or any other node sharing
// its store) to the Router, which is an engine.Observer. The Router matches
// the topic once against the trie of plain subscriptions and, per matching
// pattern, encodes the message frame once; every session subscribed with that
// pattern gets the same bytes in its outbound queue. Consumer-group
// deliveries come from the engine per member and are encoded per delivery.
//
// # Transports
//
// A session is the same whatever carries it: one lifecycle (lifecycle.go)
// admits it (admitConn: connection limits, then the credential), makes its
// protocol state (newConn), lists it for Shutdown (addConn), starts it
// (runStart: counted, its context, the welcome, the token's expiry), runs
// its ops, and tears it down once it has ended (runEnd: every subscription
// removed through removeLocked and dropSub, presence left, timers stopped,
// the connection slot given back). A subscribe, from any transport, is a
// checked subscribeSpec handed to conn.subscribeSpec (subscribe.go), which
// registers it and starts it as a group member, at the live tail or with a
// replay; a refusal is an error reply through errorFrame. Deliveries reach
// the session's bounded queue (package session) and come back through the
// callbacks of sessionOptions: drops (onDrop), queue_full gaps (encodeGap)
// and writes (onSent).
//
// A transport supplies what differs:
//
//   - Reading: how requests arrive and become ops. The WebSocket's reader
//     hands each text frame to conn.HandleFrame (conn.go), which decodes
//     it and dispatches the op; ops run in request order, each after the
//     publishes before it (publish.go). SSE reads nothing: it subscribes
//     once, from its query, with parsed specs (sse.go, sseSubscribe).
//   - Writing: how the queue's batches reach the client. The session's
//     writer writes them to the WebSocket itself (session.Accept), or
//     hands them to a session.Transport (session.NewOneWay: Write,
//     Keepalive, Close, CloseNow), which for SSE turns every frame into an
//     event and the close into a "close" event.
//   - Encoding: the welcome (welcomeFrame), replies (encodeReply), errors
//     (errorFrame), message, group-message and gap frames (protocol.go,
//     envelope.go). A message frame is encoded once per matching pattern
//     and envelope and shared by every session taking that envelope
//     (Router.fanOut, conn.lean); group deliveries and gaps are encoded
//     per item.
//   - Its kind (transportKind): whether the client sends ops, which
//     decides the welcome's limits and whether the session has a publish
//     pipeline and rate.
//
// A third transport, MQTT 3.1.1 and 5 over WebSocket binary frames and
// TCP (mqtt.go, mqtt_conn.go, mqtt_subscribe.go, mqtt_publish.go,
// mqtt_write.go), plugs in at the same points: its own packet reader and
// an admission from CONNECT, a session.NewOneWay whose Transport turns the
// queue's batches back into packets, and a case of its own in fanOut
// (mqttFrames), and in subscription.Deliver for the group deliveries of
// shared subscriptions (mqtt_group.go); retained messages on the engine's
// engine.Retainer (mqtt_retain.go) and wills (mqtt_will.go) are its own.
// What it needs of them, beyond
// what WebSocket and SSE use (built so far: all but the persistent
// sessions; docs/mqtt.md):
//
//   - Reading: its own packet reader instead of a session.Handler (the
//     WebSocket reader closes a session that sends a binary frame), and an
//     admission from CONNECT rather than from an HTTP request: admitConn's
//     two steps, the limits and the credential, taking the client's
//     address and the password's token instead of an echo.Context.
//     SUBSCRIBE becomes one subscribeSpec per filter, answered by one
//     SUBACK with a reason code each; PUBLISH the publish path, whose
//     pipeline already answers in request order (PUBACK order); PUBACK and
//     PUBCOMP the ack op.
//   - Writing: a two-way session over a byte stream: a Transport that also
//     reads, and batches that are packets back to back (the queue joins
//     frames with '\n' today).
//   - Encoding: an envelope of its own beside full and lean, encoded once
//     per pattern where the packet can be shared (QoS 0) and per delivery
//     where it carries the session's packet id (QoS 1 and 2, as group
//     deliveries are today); replies and refusals as reason codes from the
//     transport's encoder where subscribeSpec, the ops and errorFrame
//     encode JSON now; a gap has no packet and is counted instead.
//   - Acknowledgements and flow control: QoS 1 and 2 deliveries are
//     Reliable items held to the client's receive maximum, as group
//     deliveries are held to max_in_flight, and settled by packet id; a
//     Ref on the item (like groupRef) tells OnSent what was written.
//   - Sessions: a persistent session outlives its connection as positions
//     in the log, so its subscriptions and unacknowledged deliveries are
//     kept apart from the conn that runs them while connected; a client-id
//     takeover ends the earlier conn through runEnd like any other end.
//
// # Concurrency
//
// A Router is safe for concurrent use by multiple goroutines. A WebSocket
// session has one reader goroutine, started by the HTTP handler, which
// returns after the upgrade; the reader runs the client's ops in order. An
// SSE stream runs on its HTTP handler's goroutine until it ends. On Linux
// an idle WebSocket session over plain TCP holds no reader goroutine: the
// session package parks its socket and starts a reader for each burst of
// input. A session's writer goroutine runs only while it has something to
// write. A replaying subscription runs one catch-up goroutine until it is
// live (or, its reads of the log unavailable for 30 s, ended:
// replay_retry.go; the session's end stops it). An MQTT connection runs its reader goroutine (mqtt_conn.go) until
// the connection closes (an idle one over TCP or WebSocket parks its
// socket as a WebSocket session does, and a fresh goroutine reads on),
// and, once it has a shared subscription, an acker
// goroutine until the session ends (mqtt_group.go); while another gateway's
// sweep has removed its client-id record, one goroutine puts it back
// (mqtt_takeover.go, ended by the record's return, the connection's end or
// its tries; the session's end waits for it). A reload that
// changes the keys runs one goroutine that checks the open sessions'
// credentials again until it is done (recheck.go).
// Shutdown waits for all of them.
//
// Lock order. A lock is taken only while holding locks of earlier entries,
// never one of a later entry; the locks of one entry are never held
// together unless the entry says in which order. The router never calls
// into the engine while holding one of its own locks; the engine calls
// Appended, Deliver, Skipped and AppendAsync's completion perhaps with its
// own held, so those come first.
//
//  1. engine-internal locks.
//  2. Router.mu (sessions, pull members, local subscribers, the byte
//     totals of ended sessions, metrics.go): pull.go
//     (expirePulls, endGroup) and shutdown.go (handBack) take
//     pullMember.mu under it.
//  3. subscription.mu (a subscription's delivery state); pubPipe.mu (a
//     session's publish replies, handed to session.Send under it,
//     publish.go); pullMember.mu; LocalSubscription.mu (embed.go);
//     presenceMember.mu, then presenceHub.mu (presence_churn.go);
//     sseResume.mu (the index of SSE streams); sseTransport.mu (an SSE
//     response's writes).
//  4. the session's queue lock (inside session.Send and SendDeferred; see
//     the session package's lock order).
//  5. sseState.mu (an SSE stream's positions): under the queue lock by
//     FramePrefix, under sseTransport.mu by a write, under sseResume.mu by
//     a reconnect.
//  6. conn.mu (a session's subscriptions and their limits): under the
//     queue lock by onDrop and encodeGap, under sseState.mu to name a
//     stream's pattern.
//
// Router.reloadMu (reload.go) is held while Reload builds and swaps the
// live settings; under it Reload takes only the connection slots' lock
// (to set their bounds) and a new JWKS source's fetchMu (its first
// fetch), never another router lock, and nothing takes it under a lock.
//
// Leaves, under which nothing is taken: conn.mu, presenceHub.mu,
// readiness.mu (ready.go; never held across an engine call),
// mqttState.mu (the MQTT client-id index; a taken-over session is closed
// after it is let go), mqttSession.imu (an MQTT session's packet
// identifiers in flight and group deliveries awaiting acknowledgement;
// taken under the engine's locks by a group delivery, and the writer is
// woken and the group acked after it is let go),
// sessionExpiry.mu (refresh.go; its timers send with it released), the
// locks of the connection slots and per-address buckets
// (router/internal/limit), the hook client's ipMu and its cache's mu
// (router/internal/hooks), seekLocks.mu (group_seek.go; a seek waits
// holding no lock), groupLedger.mu (group_count.go; settled after conn.mu
// is let go), the JWKS source's fetchMu (router/internal/auth; held
// across a key fetch, nothing else taken under it), and deltaSub.mu and
// deltaBases.mu (delta.go; deltaSub.mu is let go before a Send, and taken
// under subscription.mu when a topic is deleted), and replayBudget.mu
// (mqtt_session_replay.go; a persistent MQTT session's replay budget:
// taken under subscription.mu when a catch-up goes live, by the writer
// when it gives back what it wrote; a catch-up waits for room holding no
// lock).
package router

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router/internal/auth"
	hookc "github.com/switchyard/switchyard/router/internal/hooks"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// Options configure a Router. The zero value of each field is its documented
// default, except Engine, which is required. Reload changes the keys
// (Auth), Hooks, OriginPatterns and some limits of a running Router
// (reload.go); the other fields are fixed by New.
type Options struct {
	// Engine is the log and group store. Required. The Router does not
	// close it.
	Engine engine.Engine
	// EngineName names the engine in GET /v1/info (the gateway passes its
	// --engine: memory, embedded or nats); default: the engine's Name
	// method, else its package's name.
	EngineName string
	// Logger receives structured logs; default: discard.
	Logger *slog.Logger
	// Registry receives the gateway's metrics and serves /metrics; default:
	// a new registry of the Router's own.
	Registry *prometheus.Registry
	// Static holds the dashboard, served at /; nil serves no dashboard.
	Static fs.FS
	// Session configures every session, WebSocket and SSE (queue bound,
	// read limit, keepalive); EncodeGap, OnDrop, OnSent and FramePrefix
	// are set by the Router.
	Session session.Options
	// MaxSubscriptions bounds one session's subscriptions; default 1000.
	MaxSubscriptions int
	// Groups bounds pull members and the leases of a session's group
	// memberships (see GroupBounds).
	Groups GroupBounds
	// MaxMessageBytes bounds a publish's data, as written in the frame
	// (message_too_large past it; the session stays open); default 1 MiB.
	// Session.ReadLimit defaults to it plus PublishEnvelopeBytes(Bounds),
	// so that the largest allowed publish fits in a frame.
	MaxMessageBytes int
	// PublishRate limits each session's publishes per second (token bucket
	// with PublishBurst); 0: unlimited.
	PublishRate  float64
	PublishBurst int
	// PublishPipeline bounds one WebSocket session's publishes in flight
	// (handed to the engine, reply not yet sent); past it the session's
	// reader stops reading until a reply is sent. Default
	// DefaultPublishPipeline (64); 1 handles a session's publishes one at a
	// time. See publish.go.
	PublishPipeline int
	// PublishPipelineBytes bounds the data bytes of those publishes
	// (one publish is always admitted when none is in flight); default
	// DefaultPublishPipelineBytes (1 MiB).
	PublishPipelineBytes int
	// MaxBodyBytes bounds an HTTP request body; default 2 MiB.
	MaxBodyBytes int64
	// MaxPublishBatch bounds the records of one batch publish (POST
	// /v1/publish {"records":[…]}); default DefaultMaxPublishBatch (1000).
	// MaxPublishBatchBytes bounds its body instead of MaxBodyBytes;
	// default DefaultMaxPublishBatchBytes (4 MiB). See http_publish.go.
	MaxPublishBatch      int
	MaxPublishBatchBytes int64
	// StatsInterval is the period of $sys.stats; $sys.topics and $sys.groups
	// follow every fifth tick. Default 1s; negative disables system topics.
	StatsInterval time.Duration
	// OriginPatterns are the browser origins allowed to open WebSockets
	// besides the gateway's own host (see websocket.AcceptOptions); default
	// none, so cross-origin pages are refused.
	OriginPatterns []string
	// ShutdownGrace bounds how long Shutdown waits for sessions to flush;
	// default 5s.
	ShutdownGrace time.Duration

	// Auth configures tokens, the admin key and anonymous access; the zero
	// value leaves everything open (see AuthOptions).
	Auth AuthOptions
	// Hooks configure the backend authorization hooks (see HookOptions);
	// the zero value configures none.
	Hooks HookOptions
	// MaxPresencePerTopic bounds the members a topic's presence lists and
	// announces; members beyond it are only counted. Default 1000.
	MaxPresencePerTopic int
	// Presence bounds presence joins per session and announcements per
	// member (see PresenceOptions).
	Presence PresenceOptions
	// MaxConnections bounds open sessions, WebSocket and SSE (503
	// too_many_connections past it); 0: unlimited.
	MaxConnections int
	// MaxConnectionsPerIP bounds open sessions, WebSocket and SSE, per
	// client IP (429 too_many_connections); 0: unlimited.
	MaxConnectionsPerIP int
	// ConnectRatePerIP limits WebSocket upgrades and SSE streams a client
	// IP may attempt per second, refused or not (token bucket, burst the
	// rate rounded down, at least 1; 429 rate_limited past it, before any
	// credential check, connect hook or key fetch); 0: unlimited. Off by
	// default like the other per-IP limits: the gateway cannot tell one
	// client from many behind a NAT, and the connect hook is shared fairly
	// whatever the rate (HookOptions.MaxConcurrentPerIP).
	ConnectRatePerIP float64
	// MaxTopics bounds the topics (not counting $ topics) that HTTP create
	// and auto-create on publish may bring about (too_many_topics); 0:
	// unlimited. Concurrent creates may overshoot it by their number.
	MaxTopics int
	// TopicPolicies give the settings of topics a publish or subscribe
	// creates, and the max_last, presence, anonymous grants and MQTT
	// retained setting of topics, by the first pattern matching the topic
	// (topic_policies.go); nil: the engine's topic defaults and the
	// global settings.
	TopicPolicies []TopicPolicy
	// MaxPartitions bounds the partitions of a topic created over HTTP;
	// default engine.MaxPartitions.
	MaxPartitions int
	// HTTPPublishRate limits POST /v1/publish per client IP per second
	// (token bucket, burst the rate rounded down, at least 1); 0: unlimited.
	HTTPPublishRate float64
	// Compression negotiates permessage-deflate with clients that offer
	// it, without context takeover: every frame is compressed on its own
	// with a pooled compressor, so an idle session holds no compressor
	// state. Default off: the gateway encodes a message once for all its
	// subscribers, while compression costs CPU per subscriber and frame,
	// and the JSON frames of typical dashboards are small; turn it on when
	// clients pay for bandwidth (mobile) and payloads are large (see
	// docs/BENCHMARKS.md). The read limit applies to the inflated frame.
	Compression bool
	// CompressionThreshold is the smallest frame compressed when
	// Compression is on; default 512 bytes, below which deflate saves
	// little and costs a compressor.
	CompressionThreshold int
	// MaxLast bounds N of a subscription's {"last": N} (bad_request past
	// it); default 100: enough for a chart's recent points per series,
	// while a wildcard over many topics replays at most N records each.
	MaxLast int
	// SSE bounds what Server-Sent Event streams hold for their
	// resumption (see SSEOptions).
	SSE SSEOptions
	// Tickets bound the connection tickets of POST /v1/tickets (see
	// TicketOptions).
	Tickets TicketOptions
	// Bounds limit the sizes of names, keys, headers, filters and ids, and
	// the queue_full dead letters of slow subscriptions (see Bounds).
	Bounds Bounds
	// TrustedProxies are the networks whose X-Forwarded-For header names
	// the client IP (for the per-IP limits); default none: the TCP peer's
	// address is the client IP.
	TrustedProxies []*net.IPNet
	// Reloader, when set, serves POST /v1/admin/reload (admin.go): it
	// loads the settings again and applies them with Reload. Default nil:
	// the call answers 404.
	Reloader Reloader
	// MQTT configures the MQTT transport (see MQTTOptions).
	MQTT MQTTOptions
	// Version is the gateway's version, reported by /healthz and the
	// switchyard_build_info metric. Default: the main module's version
	// from the build information, or "(devel)".
	Version string
}

// Defaults of Options, as withDefaults applies them.
const (
	DefaultMaxSubscriptions = 1000
	DefaultMaxMessageBytes  = 1 << 20
	DefaultStatsInterval    = time.Second
	DefaultMaxLast          = 100
)

func (o Options) withDefaults() Options {
	if o.Version == "" {
		o.Version = BuildVersion()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.MaxSubscriptions == 0 {
		o.MaxSubscriptions = 1000
	}
	if o.MaxMessageBytes == 0 {
		o.MaxMessageBytes = 1 << 20
	}
	if o.PublishPipeline <= 0 {
		o.PublishPipeline = DefaultPublishPipeline
	}
	if o.PublishPipelineBytes <= 0 {
		o.PublishPipelineBytes = DefaultPublishPipelineBytes
	}
	if o.PublishBurst == 0 {
		o.PublishBurst = max(1, int(o.PublishRate))
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = 2 << 20
	}
	if o.MaxPublishBatch <= 0 {
		o.MaxPublishBatch = DefaultMaxPublishBatch
	}
	if o.MaxPublishBatchBytes <= 0 {
		o.MaxPublishBatchBytes = DefaultMaxPublishBatchBytes
	}
	if o.StatsInterval == 0 {
		o.StatsInterval = time.Second
	}
	if o.ShutdownGrace == 0 {
		o.ShutdownGrace = 5 * time.Second
	}
	if o.CompressionThreshold == 0 {
		o.CompressionThreshold = 512
	}
	if o.MaxLast == 0 {
		o.MaxLast = 100
	}
	if o.MaxPartitions == 0 {
		o.MaxPartitions = engine.MaxPartitions
	}
	if o.Session.QueueMessages == 0 {
		o.Session.QueueMessages = 1024
	}
	o.Groups = o.Groups.withDefaults(o.Session.QueueMessages)
	if o.Session.ControlBytes == 0 {
		o.Session.ControlBytes = session.DefaultControlBytes
	}
	if o.Session.MessageTimeout == 0 {
		o.Session.MessageTimeout = session.DefaultMessageTimeout
	}
	o.Bounds = o.Bounds.withDefaults()
	if o.Session.ReadLimit == 0 {
		o.Session.ReadLimit = int64(max(o.MaxMessageBytes, 0) + PublishEnvelopeBytes(o.Bounds))
	}
	if o.Session.ReadBudget == nil && o.Bounds.MaxInboundPartialBytes > 0 {
		o.Session.ReadBudget = session.NewReadBudget(o.Bounds.MaxInboundPartialBytes)
	}
	return o
}

// Router is the gateway. Create it with New; serve it as an http.Handler;
// stop it with Shutdown.
type Router struct {
	opts    Options
	eng     engine.Engine
	log     *slog.Logger
	echo    *echo.Echo
	subs    *trie.Trie[*subscription]
	m       *metrics
	stats   stats
	stopTap func()
	nodes   nodeLink // sessions of other nodes (sessions_cluster.go)
	// beforeRegister, when set (by tests), runs in a subscribe after its
	// grants were checked and before it is registered (subscribe.go).
	beforeRegister atomic.Pointer[func()]

	ctx    context.Context // canceled by Shutdown once sessions have had their grace
	cancel context.CancelFunc

	closing atomic.Bool
	wg      sync.WaitGroup // sessions and background goroutines

	mu    sync.Mutex // guards conns and the fields below; see the lock order
	conns map[*conn]struct{}
	pulls map[string]*pullMember // guarded by mu
	// pullsBy counts the pull members in pulls by the client that made
	// them (pullClient); guarded by mu.
	pullsBy map[string]int
	local   map[*LocalSubscription]struct{} // guarded by mu

	stopBG chan struct{}          // closed by Shutdown to stop background loops
	dlq    chan engine.DeadLetter // queue_full dead letters to record

	// set holds the live settings (reload.go): keys, origins and the
	// limits Reload may change. Loaded once per decision, never locked.
	set      atomic.Pointer[liveSettings]
	reloadMu sync.Mutex     // serializes Reload (reload.go); taken under no lock (see the lock order)
	hooks    *hooks         // the hook client in force (Reload swaps it)
	hookm    *hookc.Metrics // the hooks' metrics, for the clients Reload makes
	// rechecks are the reloads' re-checks of open sessions under way
	// (recheck.go).
	rechecks   sync.WaitGroup
	recheckGen atomic.Uint64 // bumped by each re-check started
	// jwksCounts count the fetches of every key set the Router has had,
	// so that jwks_fetches_total goes on across reloads (auth.go).
	jwksCounts *auth.FetchCounts
	pres       *presenceHub
	limits     *limiter
	lim        *limitMetrics

	httpm        *httpMetrics
	writeTimeout atomic.Int64 // the NewServer's write timeout, for long polls
	bm           *boundMetrics
	sse          *sseResume
	tickets      *tickets // connection tickets (ticket.go)
	gm           *groupMetrics
	seeks        seekLocks
	ready        readiness        // the readiness probe (ready.go)
	httppub      httpPublishState // HTTP publishes (http_publish.go)
	mq           *mqttState
	deltas       *deltaBases // delta subscriptions' bases (delta.go)
	dm           deltaMetrics
}

// New creates a Router on opts.Engine and starts its background goroutines
// (system topics, pull-member expiry); Shutdown stops them.
func New(opts Options) (*Router, error) {
	if opts.Engine == nil {
		return nil, errors.New("router: Options.Engine is required")
	}
	opts = opts.withDefaults()
	if err := opts.Bounds.validate(); err != nil {
		return nil, err
	}
	if b := opts.Session.ReadBudget; b != nil && b.Max() < opts.Session.ReadLimit {
		// A message of ReadLimit bytes could never finish arriving.
		return nil, fmt.Errorf("router: the inbound read budget (%d bytes) must be at least the largest frame (%d bytes)", b.Max(), opts.Session.ReadLimit)
	}
	jwks := new(auth.FetchCounts)
	set, err := newLiveSettings(opts, nil, jwks)
	if err != nil {
		return nil, err
	}
	rt := &Router{
		opts:       opts,
		eng:        opts.Engine,
		log:        opts.Logger,
		subs:       trie.New[*subscription](),
		conns:      make(map[*conn]struct{}),
		pulls:      make(map[string]*pullMember),
		pullsBy:    make(map[string]int),
		local:      make(map[*LocalSubscription]struct{}),
		stopBG:     make(chan struct{}),
		dlq:        make(chan engine.DeadLetter, deadLetterBuffer),
		hooks:      &hooks{},
		jwksCounts: jwks,
		limits:     newLimiter(opts),
		sse:        newSSEResume(opts.SSE.withDefaults(), opts.Registry),
		tickets:    newTickets(opts.Tickets.withDefaults(), opts.Registry),
	}
	rt.set.Store(set)
	rt.hookm = rt.registerMetrics()
	rt.registerEngineCounters() // metrics_engine.go
	h, err := newHooks(opts.Hooks, rt.hookm)
	if err != nil {
		return nil, err
	}
	rt.hooks.use(h, rt.hookm)
	rt.ctx, rt.cancel = context.WithCancel(context.Background())
	rt.echo = rt.routes()
	rt.startPresence() // before the MQTT listener: its sessions may join presence
	if err := rt.startMQTT(); err != nil {
		rt.pres.close()
		return nil, err
	}
	rt.stopTap = rt.eng.Watch(rt)
	rt.startBackground()
	rt.startJWKS()
	rt.startNodes() // sessions_cluster.go
	return rt, nil
}

// ServeHTTP serves the WebSocket endpoint, the HTTP API, metrics and the
// dashboard.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt.echo.ServeHTTP(w, r)
}

// Ready reports whether the gateway can serve: not shutting down, the
// engine answering, and a probe record appended to the log and announced
// back by its live tail within ctx (ready.go).
func (rt *Router) Ready(ctx context.Context) error {
	if err := rt.engineAnswers(ctx); err != nil {
		return err
	}
	return rt.probeReady(ctx)
}

// engineAnswers reports whether the Router is not shutting down and the
// engine answers.
func (rt *Router) engineAnswers(ctx context.Context) error {
	if rt.closing.Load() {
		return perr(codeShuttingDown, "shutting down")
	}
	_, err := rt.eng.Topics(ctx)
	return err
}

// Shutdown stops accepting sessions and requests, closes every session with
// 1001 after flushing what it has queued, and makes group members leave so
// their unacked records go back to the log's groups. It waits for every
// goroutine the Router started, or until ctx is done. It does not close the
// engine.
func (rt *Router) Shutdown(ctx context.Context) error {
	if !rt.closing.CompareAndSwap(false, true) {
		return nil
	}
	rt.reloadMu.Lock() // a Reload under way ends first (reload.go)
	rt.reloadMu.Unlock()
	close(rt.stopBG)
	rt.stopMQTT()
	rt.stopLocal()
	rt.mu.Lock()
	conns := make([]*conn, 0, len(rt.conns))
	for c := range rt.conns {
		conns = append(conns, c)
	}
	rt.mu.Unlock()
	rt.handBack(ctx, conns)
	// Publishes in flight are answered before the sessions close, so
	// their replies are flushed with the rest (publish.go).
	pctx, pcancel := context.WithTimeout(ctx, rt.opts.ShutdownGrace)
	awaitPublishes(pctx, conns)
	pcancel()
	for _, c := range conns {
		c.sess.Close(websocket.StatusGoingAway, "server shutting down")
	}
	done := make(chan struct{})
	go func() {
		rt.wg.Wait()
		close(done)
	}()
	grace := time.NewTimer(rt.opts.ShutdownGrace)
	defer grace.Stop()
	var err error
	select {
	case <-done:
	case <-grace.C:
		rt.cancel()
		<-done
	case <-ctx.Done():
		rt.cancel()
		err = ctx.Err()
		select {
		case <-done:
		case <-time.After(time.Second):
		}
	}
	rt.cancel()
	rt.stopPulls()
	rt.stopTap()
	rt.stopNodes()
	rt.pres.close()
	rt.waitMQTT()
	return err
}

// Appended implements engine.Observer: live fan-out of one record to every
// matching plain subscription on this node.
//
// The frame is encoded once per matching pattern and envelope
// (envelope.go) and shared by every session of that pattern; the
// deliveries are counted once per record, not per session.
func (rt *Router) Appended(rec *engine.Record) { rt.fanOut(rec, nil) }

// fanOut queues rec for every matching plain subscription on this node;
// with d, the writers are woken when d is flushed (deferral.go).
func (rt *Router) fanOut(rec *engine.Record, d *session.Deferral) {
	if rec.Topic == readyTopic {
		rt.readyAppended(rec) // a readiness probe (ready.go), for no subscriber
		return
	}
	var body []byte
	lean := 0 // body[:lean] is the lean envelope's part
	queued := 0
	var mq mqttFrames // the record's MQTT packets (mqtt_write.go)
	var dc deltaCtx   // delta subscriptions' frames (delta.go)
	rt.subs.Match(rec.Topic, func(pattern string, subs []*subscription) {
		var full, short []byte // the frames of the full and lean envelopes
		dc.pattern()
		for _, s := range subs {
			if !s.accepts(rec) {
				continue
			}
			if s.local != nil {
				s.local.deliver(rec)
				continue
			}
			if body == nil {
				body, lean = recordBody(make([]byte, 0, 128+len(rec.Data)), rec)
			}
			var frame []byte
			switch {
			case s.c.kind == transportMQTT:
				if frame = mq.frame(rec, s); frame == nil {
					continue
				}
			case s.c.lean:
				if short == nil {
					short = encodeLeanMessage(pattern, rec.Topic, body[:lean])
				}
				frame = short
			default:
				if full == nil {
					full = encodeMessage(pattern, body)
				}
				frame = full
			}
			if s.delta != nil {
				if rt.liveDelta(&dc, s, pattern, rec, frame, d) {
					queued++
				}
				continue
			}
			if s.live(rec, frame, d) {
				queued++
			}
		}
	})
	dc.done(rt, rec)
	rt.countPlainDeliveries(queued)
}

// countPlainDeliveries counts n plain-subscription messages queued.
func (rt *Router) countPlainDeliveries(n int) {
	if n > 0 {
		rt.m.deliveriesPlain.Add(float64(n))
	}
}

// TopicDeleted implements engine.Observer: every plain subscriber whose
// pattern matches the topic is sent a topic_deleted frame; a replay of the
// topic stops there, and records of a topic created again under the name
// arrive from offset 0.
func (rt *Router) TopicDeleted(topic string) {
	rt.limits.forgetTopic(topic)
	rt.deltas.forgetTopic(topic)
	rt.heldTopicDeleted(topic) // mqtt_group.go
	rt.subs.Match(topic, func(pattern string, subs []*subscription) {
		for _, s := range subs {
			if s.local == nil {
				s.topicDeleted(topic)
			}
		}
	})
}

func (rt *Router) addConn(c *conn) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.closing.Load() {
		return false
	}
	rt.conns[c] = struct{}{}
	rt.wg.Add(1)
	return true
}

func (rt *Router) removeConn(c *conn) {
	st := c.sess.Stats() // final: the session has ended
	rt.mu.Lock()
	delete(rt.conns, c)
	rt.m.endedBytesIn, rt.m.endedBytesOut = rt.m.endedBytesIn+st.BytesIn, rt.m.endedBytesOut+st.BytesOut
	rt.mu.Unlock()
	rt.wg.Done()
}

func (rt *Router) connList() []*conn {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]*conn, 0, len(rt.conns))
	for c := range rt.conns {
		out = append(out, c)
	}
	return out
}

// newID returns a random 64-bit identifier in hex.
func newID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
