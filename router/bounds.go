package router

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router/internal/limit"
	"github.com/switchyard/switchyard/session"
	"github.com/switchyard/switchyard/trie"
)

// Bounds limit what one request or one session may make the gateway hold
// or do: the sizes of names, keys, headers and filters, how much of a
// client's input an error may echo, and how many queue_full dead letters a
// slow subscription may cost. The zero value of each field is its default.
type Bounds struct {
	// MaxTopicBytes bounds topic and pattern names in bytes (invalid_topic
	// or invalid_pattern past it); default and maximum 255, the
	// protocol's limit.
	MaxTopicBytes int
	// MaxTopicDepth bounds topic and pattern names in segments; default and
	// maximum 16, the protocol's limit.
	MaxTopicDepth int
	// MaxKeyBytes bounds a publish's key (bad_request); default 1 KiB.
	MaxKeyBytes int
	// MaxMsgIDBytes bounds a publish's msg_id (bad_request); default 256:
	// ample for UUIDs and hashes, and the dedupe window holds every id
	// for minutes.
	MaxMsgIDBytes int
	// MaxHeaders bounds the headers of one publish (bad_request); default 32.
	MaxHeaders int
	// MaxHeaderBytes bounds the bytes of one publish's header names and
	// values together (bad_request); default 8 KiB, like common HTTP
	// servers' header limits.
	MaxHeaderBytes int
	// MaxFilterHeaders bounds the pairs of one subscription's header
	// filter (bad_request); default 16.
	MaxFilterHeaders int
	// MaxFilterBytes bounds the bytes of one subscription's filter names
	// and values (bad_request); default 4 KiB.
	MaxFilterBytes int
	// MaxSessionFilterBytes bounds the filter bytes of all of a session's
	// subscriptions together (bad_request); default 64 KiB, so that a
	// session's filters cost at most that whatever its subscription count.
	MaxSessionFilterBytes int
	// MaxIDBytes bounds a request's "id" (bad_request, without echoing the
	// id); default 128. Replies echo the id, so it is the part of every
	// reply a client chooses.
	MaxIDBytes int
	// DeadLetterRate is how many queue_full dead letters one plain
	// subscription may record per second (a token bucket of
	// DeadLetterBurst); drops past it are counted and reported as gaps as
	// always but not recorded as dead letters. Default 1; negative: none
	// are recorded; +Inf: every drop is.
	DeadLetterRate float64
	// DeadLetterBurst is the dead-letter bucket's size; default 10.
	DeadLetterBurst int
	// MaxDeltaPartitions bounds the partitions one delta subscription
	// tracks (delta.go); past it a partition's messages are sent full.
	// Default DefaultMaxDeltaPartitions (1024).
	MaxDeltaPartitions int
	// MaxDeltaBases bounds the partitions holding a base record for
	// delta subscriptions; default DefaultMaxDeltaBases (65536).
	MaxDeltaBases int
	// MaxDeltaBaseBytes bounds the payload bytes of those base records;
	// default DefaultMaxDeltaBaseBytes (64 MiB).
	MaxDeltaBaseBytes int
	// MaxInboundPartialBytes bounds, across every WebSocket session of the
	// gateway together, the read buffers held by inbound messages still
	// arriving (session.ReadBudget): past it a session needing more waits,
	// within its message timeout, for others to finish. Default 128 MiB;
	// negative: sessions are bounded one by one only. Ignored when
	// Options.Session.ReadBudget is set.
	MaxInboundPartialBytes int64
}

// Defaults for Bounds.
const (
	DefaultMaxKeyBytes           = 1 << 10
	DefaultMaxMsgIDBytes         = 256
	DefaultMaxHeaders            = 32
	DefaultMaxHeaderBytes        = 8 << 10
	DefaultMaxFilterHeaders      = 16
	DefaultMaxFilterBytes        = 4 << 10
	DefaultMaxSessionFilterBytes = 64 << 10
	DefaultMaxIDBytes            = 128
	DefaultDeadLetterRate        = 1
	DefaultDeadLetterBurst       = 10

	DefaultMaxInboundPartialBytes = 128 << 20
	DefaultMaxTopicBytes          = trie.MaxNameBytes
	DefaultMaxTopicDepth          = trie.MaxSegments
)

func (b Bounds) withDefaults() Bounds {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&b.MaxTopicBytes, trie.MaxNameBytes)
	def(&b.MaxTopicDepth, trie.MaxSegments)
	def(&b.MaxKeyBytes, DefaultMaxKeyBytes)
	def(&b.MaxMsgIDBytes, DefaultMaxMsgIDBytes)
	def(&b.MaxHeaders, DefaultMaxHeaders)
	def(&b.MaxHeaderBytes, DefaultMaxHeaderBytes)
	def(&b.MaxFilterHeaders, DefaultMaxFilterHeaders)
	def(&b.MaxFilterBytes, DefaultMaxFilterBytes)
	def(&b.MaxSessionFilterBytes, DefaultMaxSessionFilterBytes)
	def(&b.MaxIDBytes, DefaultMaxIDBytes)
	def(&b.DeadLetterBurst, DefaultDeadLetterBurst)
	def(&b.MaxDeltaPartitions, DefaultMaxDeltaPartitions)
	def(&b.MaxDeltaBases, DefaultMaxDeltaBases)
	def(&b.MaxDeltaBaseBytes, DefaultMaxDeltaBaseBytes)
	if b.DeadLetterRate == 0 {
		b.DeadLetterRate = DefaultDeadLetterRate
	}
	if b.MaxInboundPartialBytes == 0 {
		b.MaxInboundPartialBytes = DefaultMaxInboundPartialBytes
	}
	return b
}

// validate reports settings the protocol cannot honour.
func (b Bounds) validate() error {
	switch {
	case b.MaxTopicBytes < 0 || b.MaxTopicBytes > trie.MaxNameBytes:
		return fmt.Errorf("router: Bounds.MaxTopicBytes must be 1 to %d", trie.MaxNameBytes)
	case b.MaxTopicDepth < 0 || b.MaxTopicDepth > trie.MaxSegments:
		return fmt.Errorf("router: Bounds.MaxTopicDepth must be 1 to %d", trie.MaxSegments)
	case b.MaxKeyBytes < 0, b.MaxMsgIDBytes < 0, b.MaxHeaders < 0, b.MaxHeaderBytes < 0,
		b.MaxFilterHeaders < 0, b.MaxFilterBytes < 0, b.MaxSessionFilterBytes < 0, b.MaxIDBytes < 0,
		b.DeadLetterBurst < 0, b.MaxDeltaPartitions < 0, b.MaxDeltaBases < 0, b.MaxDeltaBaseBytes < 0:
		return errors.New("router: Bounds must not be negative (except DeadLetterRate)")
	case b.MaxIDBytes > 0 && b.MaxIDBytes < 3:
		return errors.New("router: Bounds.MaxIDBytes must be at least 3")
	}
	return nil
}

// Limit labels of switchyard_limit_rejections_total for the bounds here.
const (
	limitTopicBytes         = "topic_bytes"
	limitTopicDepth         = "topic_depth"
	limitKeyBytes           = "key_bytes"
	limitMsgIDBytes         = "msg_id_bytes"
	limitHeaders            = "headers"
	limitHeaderBytes        = "header_bytes"
	limitFilterHeaders      = "filter_headers"
	limitFilterBytes        = "filter_bytes"
	limitSessionFilterBytes = "session_filter_bytes"
	limitIDBytes            = "id_bytes"
	limitControlQueueBytes  = "control_queue_bytes"
	limitMessageTimeout     = "message_timeout"
)

// refuse is a protocol error caused by a limit; the transport that renders
// it counts it under the limit's label.
func refuse(limit, code, format string, args ...any) *protoError {
	pe := perr(code, format, args...)
	pe.Limit = limit
	return pe
}

// countLimit counts pe under its limit label, if it has one.
func (rt *Router) countLimit(pe *protoError) {
	if pe != nil && pe.Limit != "" {
		rt.lim.limited.WithLabelValues(pe.Limit).Inc()
	}
}

// countSessionEnd counts a session the session package closed for a limit.
func (rt *Router) countSessionEnd(err error) {
	switch {
	case errors.Is(err, session.ErrControlOverflow):
		rt.lim.limited.WithLabelValues(limitControlQueueBytes).Inc()
	case errors.Is(err, session.ErrMessageTimeout):
		rt.lim.limited.WithLabelValues(limitMessageTimeout).Inc()
	}
}

// checkName applies the configured length and depth limits to a topic or
// pattern. It runs before the syntax check, so that an oversized name is
// refused without being scanned or echoed.
func checkName(b *Bounds, name string, pattern bool) *protoError {
	code, what := codeInvalidTopic, "topic"
	if pattern {
		code, what = codeInvalidPattern, "pattern"
	}
	if len(name) > b.MaxTopicBytes {
		return refuse(limitTopicBytes, code, "%s is %d bytes; the limit is %d", what, len(name), b.MaxTopicBytes)
	}
	if d := strings.Count(name, ".") + 1; d > b.MaxTopicDepth {
		return refuse(limitTopicDepth, code, "%s has %d segments; the limit is %d", what, d, b.MaxTopicDepth)
	}
	return nil
}

// validTopic checks a client's topic name: the limits, then the syntax.
func validTopic(b *Bounds, name string) *protoError {
	if pe := checkName(b, name, false); pe != nil {
		return pe
	}
	if err := trie.ValidateTopic(name); err != nil {
		return nameError(codeInvalidTopic, name, err)
	}
	return nil
}

// validPattern checks a client's pattern: the limits, then the syntax.
func validPattern(b *Bounds, name string) *protoError {
	if pe := checkName(b, name, true); pe != nil {
		return pe
	}
	if err := trie.ValidatePattern(name); err != nil {
		return nameError(codeInvalidPattern, name, err)
	}
	return nil
}

// mapSize is the bytes of a string map's names and values.
func mapSize(m map[string]string) int {
	n := 0
	for k, v := range m {
		n += len(k) + len(v)
	}
	return n
}

// checkPublishSizes applies the key, msg_id and header limits.
func checkPublishSizes(b *Bounds, m *engine.Message) *protoError {
	switch {
	case len(m.Key) > b.MaxKeyBytes:
		return refuse(limitKeyBytes, codeBadRequest, "key is %d bytes; the limit is %d", len(m.Key), b.MaxKeyBytes)
	case len(m.MsgID) > b.MaxMsgIDBytes:
		return refuse(limitMsgIDBytes, codeBadRequest, "msg_id is %d bytes; the limit is %d", len(m.MsgID), b.MaxMsgIDBytes)
	case len(m.Headers) > b.MaxHeaders:
		return refuse(limitHeaders, codeBadRequest, "%d headers; the limit is %d", len(m.Headers), b.MaxHeaders)
	}
	if n := mapSize(m.Headers); n > b.MaxHeaderBytes {
		return refuse(limitHeaderBytes, codeBadRequest, "headers hold %d bytes; the limit is %d", n, b.MaxHeaderBytes)
	}
	return nil
}

// checkFilter applies the per-subscription filter limits and returns the
// filter's size.
func checkFilter(b *Bounds, f map[string]string) (int, *protoError) {
	if len(f) > b.MaxFilterHeaders {
		return 0, refuse(limitFilterHeaders, codeBadRequest, "filter has %d headers; the limit is %d", len(f), b.MaxFilterHeaders)
	}
	n := mapSize(f)
	if n > b.MaxFilterBytes {
		return 0, refuse(limitFilterBytes, codeBadRequest, "filter holds %d bytes; the limit is %d", n, b.MaxFilterBytes)
	}
	return n, nil
}

// welcomeLimits are the limits a session's welcome frame announces, the
// live ones from set, the settings the session was admitted with.
func (rt *Router) welcomeLimits(sopts session.Options, set *liveSettings) map[string]any {
	b := &rt.opts.Bounds
	return map[string]any{
		"max_frame_bytes":          sopts.ReadLimit,
		"max_message_bytes":        set.maxMessageBytes,
		"max_subscriptions":        set.maxSubscriptions,
		"queue_messages":           sopts.QueueMessages,
		"publish_rate":             set.publishRate,
		"max_topic_bytes":          b.MaxTopicBytes,
		"max_topic_depth":          b.MaxTopicDepth,
		"max_key_bytes":            b.MaxKeyBytes,
		"max_msg_id_bytes":         b.MaxMsgIDBytes,
		"max_headers":              b.MaxHeaders,
		"max_header_bytes":         b.MaxHeaderBytes,
		"max_filter_headers":       b.MaxFilterHeaders,
		"max_filter_bytes":         b.MaxFilterBytes,
		"max_session_filter_bytes": b.MaxSessionFilterBytes,
		"max_id_bytes":             b.MaxIDBytes,
		"control_queue_bytes":      sopts.ControlBytes,
		"message_timeout_ms":       sopts.MessageTimeout.Milliseconds(),
	}
}

// dlBucket is a plain subscription's token bucket for queue_full dead
// letters (Bounds.DeadLetterRate, Bounds.DeadLetterBurst). The zero value
// is a full bucket.
type dlBucket struct{ b limit.Bucket }

// take reports whether a dead letter may be recorded at now.
func (d *dlBucket) take(b *Bounds, now time.Time) bool {
	return d.b.Take(b.DeadLetterRate, b.DeadLetterBurst, now)
}

// maxNackError bounds the error text a nack stores with its record (and
// later with its dead letter); longer texts are cut.
const maxNackError = 1 << 10

// nackReason cuts a nack's error text to maxNackError bytes.
func nackReason(s string) string {
	cut, _ := cutUTF8(s, maxNackError)
	return cut
}
