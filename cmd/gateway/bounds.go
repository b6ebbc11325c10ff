package main

import (
	"flag"
	"log/slog"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// wireConfig holds the limits on what one WebSocket client (and, for names,
// keys and headers, one HTTP request) may make the gateway hold or do.
// SECURITY.md lists each with what a client sees past it.
type wireConfig struct {
	MaxTopicBytes         int
	MaxTopicDepth         int
	MaxKeyBytes           int
	MaxMsgIDBytes         int
	MaxHeaders            int
	MaxHeaderBytes        int
	MaxFilterHeaders      int
	MaxFilterBytes        int
	MaxSessionFilterBytes int
	MaxIDBytes            int
	ControlQueueBytes     int
	MessageTimeout        time.Duration
	DeadLetterRate        float64
	DeadLetterBurst       int
	MaxInboundPartial     int64
}

func addWireFlags(fs *flag.FlagSet, w *wireConfig) {
	fs.IntVar(&w.MaxTopicBytes, "max-topic-bytes", 255, "longest topic or pattern in bytes, at most 255 (invalid_topic / invalid_pattern)")
	fs.IntVar(&w.MaxTopicDepth, "max-topic-depth", 16, "most segments of a topic or pattern, at most 16 (invalid_topic / invalid_pattern)")
	fs.IntVar(&w.MaxKeyBytes, "max-key-bytes", router.DefaultMaxKeyBytes, "longest publish key in bytes (bad_request)")
	fs.IntVar(&w.MaxMsgIDBytes, "max-msg-id-bytes", router.DefaultMaxMsgIDBytes, "longest publish msg_id in bytes (bad_request)")
	fs.IntVar(&w.MaxHeaders, "max-headers", router.DefaultMaxHeaders, "most headers of one publish (bad_request)")
	fs.IntVar(&w.MaxHeaderBytes, "max-header-bytes", router.DefaultMaxHeaderBytes, "bytes of one publish's header names and values (bad_request)")
	fs.IntVar(&w.MaxFilterHeaders, "max-filter-headers", router.DefaultMaxFilterHeaders, "most header pairs of one subscription filter (bad_request)")
	fs.IntVar(&w.MaxFilterBytes, "max-filter-bytes", router.DefaultMaxFilterBytes, "bytes of one subscription filter (bad_request)")
	fs.IntVar(&w.MaxSessionFilterBytes, "max-session-filter-bytes", router.DefaultMaxSessionFilterBytes, "bytes of all of a session's subscription filters (bad_request)")
	fs.IntVar(&w.MaxIDBytes, "max-id-bytes", router.DefaultMaxIDBytes, `longest request "id" in bytes; longer ids get bad_request without the id`)
	fs.IntVar(&w.ControlQueueBytes, "control-queue-bytes", session.DefaultControlBytes, "bytes of replies and errors a session may leave unread before it is closed with 1008")
	fs.DurationVar(&w.MessageTimeout, "message-timeout", session.DefaultMessageTimeout, "time an inbound message (all its fragments) may take to arrive before the session is closed with 1008")
	fs.Float64Var(&w.DeadLetterRate, "dead-letter-rate", router.DefaultDeadLetterRate, "queue_full dead letters recorded per second per plain subscription (negative: none; inf: every drop); drops stay counted and reported as gaps")
	fs.IntVar(&w.DeadLetterBurst, "dead-letter-burst", router.DefaultDeadLetterBurst, "burst of --dead-letter-rate")
	fs.Int64Var(&w.MaxInboundPartial, "max-inbound-partial-bytes", router.DefaultMaxInboundPartialBytes, "read buffers all sessions' unfinished inbound messages may hold together; past it a reader waits within its --message-timeout (negative: no gateway-wide bound)")
}

// bounds returns the router's view of the limits.
func (w wireConfig) bounds() router.Bounds {
	return router.Bounds{
		MaxTopicBytes:         w.MaxTopicBytes,
		MaxTopicDepth:         w.MaxTopicDepth,
		MaxKeyBytes:           w.MaxKeyBytes,
		MaxMsgIDBytes:         w.MaxMsgIDBytes,
		MaxHeaders:            w.MaxHeaders,
		MaxHeaderBytes:        w.MaxHeaderBytes,
		MaxFilterHeaders:      w.MaxFilterHeaders,
		MaxFilterBytes:        w.MaxFilterBytes,
		MaxSessionFilterBytes: w.MaxSessionFilterBytes,
		MaxIDBytes:            w.MaxIDBytes,
		DeadLetterRate:        w.DeadLetterRate,
		DeadLetterBurst:       w.DeadLetterBurst,

		MaxInboundPartialBytes: w.MaxInboundPartial,
	}
}

// defaultMaxMessageBytes is the default of --max-message-bytes (the
// router's default too).
const defaultMaxMessageBytes = 1 << 20

// warnFrameLimit logs when --max-frame-bytes was set below what a publish
// of --max-message-bytes in the largest envelope the other limits allow
// needs: such a publish would close its session with 1009 instead of
// being answered.
func warnFrameLimit(log *slog.Logger, cfg config) {
	need := int64(max(cfg.MaxMessageBytes, 0) + router.PublishEnvelopeBytes(cfg.Wire.bounds()))
	if cfg.MaxFrameBytes > 0 && cfg.MaxFrameBytes < need {
		log.Warn("--max-frame-bytes leaves no room for the envelope of the largest publish: a publish near --max-message-bytes closes its session with 1009",
			"max_frame_bytes", cfg.MaxFrameBytes, "needed", need)
	}
}

// groupBounds returns the router's bounds on consumer groups; a group's
// default window sizes a membership's lease reservation.
func groupBounds(cfg config) router.GroupBounds {
	b := cfg.Groups
	b.DefaultWindow = cfg.MaxInFlight
	return b
}

// deadLetterBounds bounds the dead letters the engine keeps
// (engine.GroupPolicy.MaxGroupDeadLetters, MaxDeadLetters,
// MaxDeadLetterBytes).
type deadLetterBounds struct {
	PerGroup int
	Count    int
	Bytes    int64
}

func addDeadLetterFlags(fs *flag.FlagSet, b *deadLetterBounds, p engine.GroupPolicy) {
	fs.IntVar(&b.PerGroup, "max-group-dead-letters", p.MaxGroupDeadLetters, "max_attempts dead letters kept per group until redriven; past it the group's oldest letter is dropped (switchyard_dead_letters_evicted_total) (negative: no bound)")
	fs.IntVar(&b.Count, "max-dead-letters", p.MaxDeadLetters, "dead letters kept in all, both reasons; past it the oldest letter is dropped (negative: no bound)")
	fs.Int64Var(&b.Bytes, "max-dead-letter-bytes", p.MaxDeadLetterBytes, "bytes of the dead letters kept in all (memory engine: data, key, headers and error; JetStream: as the stream stores them); past it the oldest letters are dropped (negative: no bound)")
}
