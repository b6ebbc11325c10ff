package router

// HTTP publish: POST /v1/publish with one record (the WebSocket publish's
// fields) or a batch, {"records":[{…publish fields…}, …]}.
//
// One record is answered as before: 200 {"topic","partition","offset",
// "duplicate"?}, or the error with its status (503 + Retry-After on
// backpressure, 429 past --http-publish-rate, ...).
//
// A batch is answered 200 {"results":[…]} once every record has been
// handled, one result per record in request order: {"topic","partition",
// "offset","duplicate"?} for a stored record, {"code","message"} for one
// that was refused (a record's own fault, a grant, the rate limit, the
// engine). Records are checked one by one in order, as single publishes
// are (fields, grants, the publish hook, the rate limit, which counts each
// record), and each checked record is handed to the engine at once
// (engine.AsyncAppender) without waiting for the earlier ones to be
// stored: a batch costs about one append's round trip, not one per
// record. Records of one batch that share a partition are stored in
// request order; msg_id makes each record idempotent on its own, as for a
// single publish. A refused record does not stop the others. The body as
// a whole is refused (400/413, nothing appended) when it is not a JSON
// object, when "records" is not an array of 1 to Options.MaxPublishBatch
// entries, when it also carries a single record's fields, or when it is
// over Options.MaxPublishBatchBytes. Each such refusal of a bound is
// counted in switchyard_limit_rejections_total (publish_batch_records,
// publish_batch_bytes).
//
// Deferred wakes. Every HTTP publish's fan-out queues its frames through
// one Deferral shared by the HTTP publishes of the router (deferral.go):
// the subscribers' writers are woken when the last HTTP publish in flight
// has been appended, or once the Deferral's bound (the sessions'
// MaxDeferredWake, 1 ms by default) has passed. A publisher that sends
// alone is answered and its record delivered as before; publishes that
// overlap, over many connections or in one batch, reach each subscriber
// as one batch of frames: one wake and one write per subscriber instead
// of one per record. A publish that waits for something else first (the
// publish hook's round trip, an engine wait through engine.WithWaitHook)
// flushes the Deferral before it waits.
//
// # Concurrency
//
// The handlers run on net/http's goroutines, one per connection; the
// shared state is httpPublishState's counter (atomic) and its Deferral
// (safe for concurrent use). A batch's done callbacks may run on the
// engine's goroutines, each writing its own result slot; the handler reads
// the slots after waiting for all of them.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/session"
)

// Defaults of Options.MaxPublishBatch and MaxPublishBatchBytes.
const (
	// DefaultMaxPublishBatch is the wire contract's largest batch: as many
	// records as the largest page of a listing, so one request costs about
	// what the largest reply of the API does.
	DefaultMaxPublishBatch = 1000
	// DefaultMaxPublishBatchBytes is a batch body of 1,000 records of
	// about 4 KiB each, or of a few records of the largest default size:
	// twice the bound of a single publish's body.
	DefaultMaxPublishBatchBytes = 4 << 20
)

// Limit labels of a batch refused by its bounds.
const (
	limitPublishBatchRecords = "publish_batch_records"
	limitPublishBatchBytes   = "publish_batch_bytes"
)

// httpPublishState is what the HTTP publishes of one router share: the
// Deferral their fan-out goes through and how many are being appended.
// The zero value is ready; the Deferral is made on the first publish.
type httpPublishState struct {
	once     sync.Once
	d        *session.Deferral
	inFlight atomic.Int64 // HTTP publishes between begin and end
}

// httpDeferral returns the router's HTTP publish Deferral.
func (rt *Router) httpDeferral() *session.Deferral {
	st := &rt.httppub
	st.once.Do(func() { st.d = session.NewDeferral(rt.opts.Session.MaxDeferredWake) })
	return st.d
}

// beginHTTPAppend marks an HTTP publish as being appended and returns the
// context its appends use: ctx carrying the shared Deferral, which an
// engine wait flushes.
func (rt *Router) beginHTTPAppend(ctx context.Context) context.Context {
	d := rt.httpDeferral()
	rt.httppub.inFlight.Add(1)
	return engine.WithWaitHook(context.WithValue(ctx, deferralKey{}, d), d.Flush)
}

// endHTTPAppend ends what beginHTTPAppend began; the last publish in
// flight wakes the writers the HTTP publishes queued for.
func (rt *Router) endHTTPAppend() {
	if rt.httppub.inFlight.Add(-1) == 0 {
		rt.httppub.d.Flush()
	}
}

// readPublishBody reads a publish body of at most limit bytes. over is
// true (and the body cut) past the limit.
func readPublishBody(c echo.Context, limit int64) (body []byte, over bool, err error) {
	r := c.Request().Body
	n := c.Request().ContentLength
	if n < 0 || n > limit {
		n = min(limit, 4<<10)
	}
	buf := make([]byte, 0, n+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		room := min(int64(cap(buf)), limit+1)
		m, err := r.Read(buf[len(buf):room])
		buf = buf[:len(buf)+m]
		if int64(len(buf)) > limit {
			return buf, true, nil
		}
		if errors.Is(err, io.EOF) {
			return buf, false, nil
		}
		if err != nil {
			return buf, false, err
		}
	}
}

// publishBody is a publish body decoded by encoding/json: one record's
// fields, or "records".
type publishBody struct {
	request
	Records json.RawMessage `json:"records"`
}

// isBatch reports whether b names "records" (null counts as absent).
func (b *publishBody) isBatch() bool {
	return b.Records != nil && !bytes.Equal(b.Records, []byte("null"))
}

// looksLikeBatch reports whether a body cut at the size limit starts as
// a batch does: its first key is "records".
func looksLikeBatch(body []byte) bool {
	body = bytes.TrimLeft(body, " \t\r\n")
	if len(body) == 0 || body[0] != '{' {
		return false
	}
	return bytes.HasPrefix(bytes.TrimLeft(body[1:], " \t\r\n"), []byte(`"records"`))
}

// decodeBodyError is the error of a body encoding/json refused.
func decodeBodyError(err error, what string) *protoError {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return perr(codeBadRequest, "%s must be a JSON object", what)
		}
		return perr(codeBadRequest, "field %q has the wrong type (want %s)", te.Field, te.Type.String())
	}
	return perr(codeBadRequest, "%s is not valid JSON", what)
}

func (rt *Router) httpPublish(c echo.Context) error {
	limit := max(rt.opts.MaxBodyBytes, rt.opts.MaxPublishBatchBytes)
	body, over, err := readPublishBody(c, limit)
	if err != nil {
		return perr(codeBadRequest, "reading body: %v", err)
	}
	if over {
		if looksLikeBatch(body) {
			rt.lim.limited.WithLabelValues(limitPublishBatchBytes).Inc()
			return perr(codeTooLarge, "batch publish body is larger than %d bytes; send the records in several requests", rt.opts.MaxPublishBatchBytes)
		}
		return perr(codeTooLarge, "request body is larger than %d bytes", rt.opts.MaxBodyBytes)
	}
	var pb publishBody
	if !wire.DecodeFast(body, &pb.request) { // the fast path fills the request as encoding/json would
		pb = publishBody{}
		if err := json.Unmarshal(body, &pb); err != nil {
			return decodeBodyError(err, "body")
		}
	}
	if pb.isBatch() {
		if int64(len(body)) > rt.opts.MaxPublishBatchBytes {
			rt.lim.limited.WithLabelValues(limitPublishBatchBytes).Inc()
			return perr(codeTooLarge, "batch publish body is larger than %d bytes; send the records in several requests", rt.opts.MaxPublishBatchBytes)
		}
		return rt.httpPublishBatch(c, &pb)
	}
	if int64(len(body)) > rt.opts.MaxBodyBytes {
		return perr(codeTooLarge, "request body is larger than %d bytes", rt.opts.MaxBodyBytes)
	}
	return rt.httpPublishOne(c, &pb.request)
}

// httpPublishOne publishes one record.
func (rt *Router) httpPublishOne(c echo.Context, req *request) error {
	who := rt.principalOf(c)
	msg, pe := rt.checkHTTPRecord(c, req, who, time.Now())
	if pe != nil {
		return pe
	}
	ctx := rt.beginHTTPAppend(c.Request().Context())
	a, err := rt.append(ctx, msg, "http")
	if err != nil {
		rt.endHTTPAppend()
		return err
	}
	err = writePublished(c, msg.Topic, a)
	flushReply(c)
	rt.endHTTPAppend()
	return err
}

// flushReply sends what the handler wrote so far, so that the publisher
// has its reply before the subscribers' writers are woken (which makes
// them runnable ahead of the connection's next request).
func flushReply(c echo.Context) {
	_ = http.NewResponseController(c.Response()).Flush() // not every writer flushes; then net/http does after the handler
}

// writePublished writes the reply of one stored record.
func writePublished(c echo.Context, topic string, a engine.Appended) error {
	if c.Request().URL.RawQuery != "" { // ?pretty and the like: echo's encoder
		out := map[string]any{"topic": topic, "partition": a.Partition, "offset": a.Offset}
		if a.Duplicate {
			out["duplicate"] = true
		}
		return c.JSON(http.StatusOK, out)
	}
	// The bytes c.JSON writes for that map: keys sorted, a newline after.
	b := make([]byte, 0, 64+len(topic))
	if a.Duplicate {
		b = append(b, `{"duplicate":true,"offset":`...)
	} else {
		b = append(b, `{"offset":`...)
	}
	b = strconv.AppendInt(b, a.Offset, 10)
	b = append(b, `,"partition":`...)
	b = strconv.AppendInt(b, int64(a.Partition), 10)
	b = append(b, `,"topic":`...)
	b = appendJSONString(b, topic)
	b = append(b, "}\n"...)
	return c.JSONBlob(http.StatusOK, b)
}

// appendJSONString appends s as a JSON string as encoding/json writes it
// (HTML characters escaped, as c.JSON does).
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if b := s[i]; b < 0x20 || b >= 0x80 || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&' {
			q, _ := json.Marshal(s)
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}

// checkHTTPRecord checks one HTTP publish: its fields, the caller's grant
// (else the publish hook, after the rate limit so that a flood does not
// reach the application) and the per-client rate limit, which counts it.
func (rt *Router) checkHTTPRecord(c echo.Context, req *request, who *principal, now time.Time) (engine.Message, *protoError) {
	set := rt.settings()
	msg, pe := parsePublish(req, set.maxMessageBytes, &rt.opts.Bounds)
	if pe != nil {
		rt.m.rejected.WithLabelValues(pe.Code).Inc()
		return msg, pe
	}
	granted := who.CanPublish(msg.Topic)
	if !granted && !rt.hooks.enabled(hookPublish) {
		return msg, rt.forbidden("publish", "not allowed to publish to %q", msg.Topic)
	}
	if !set.httpPublish.Allow(c.RealIP(), now) {
		rt.lim.limited.WithLabelValues("http_publish_rate").Inc()
		rt.m.publishes.WithLabelValues("http", codeRateLimited).Inc()
		c.Response().Header().Set("Retry-After", "1")
		return msg, perr(codeRateLimited, "publish rate limit of %g/s per client exceeded", set.httpPublishRate)
	}
	if !granted {
		if rt.httppub.inFlight.Load() > 0 {
			rt.httpDeferral().Flush() // before the round trip
		}
		if pe := rt.hookPublish(c.Request().Context(), "", who, req.Key, &msg.Data, &msg.Headers, msg.Topic); pe != nil {
			return msg, pe
		}
	}
	return msg, nil
}

// batchResult is one record's outcome in a batch.
type batchResult struct {
	topic string
	a     engine.Appended
	err   error
}

// httpPublishBatch publishes the records of a batch, pipelined, and
// answers with a result per record.
func (rt *Router) httpPublishBatch(c echo.Context, pb *publishBody) error {
	if pb.Topic != nil || pb.Data != nil || pb.Key != nil || pb.MsgID != nil || pb.Headers != nil || pb.Priority != nil || pb.Encoding != nil {
		return perr(codeBadRequest, `a batch publish takes only "records"; give each record's fields inside it`)
	}
	var records []json.RawMessage
	if err := json.Unmarshal(pb.Records, &records); err != nil {
		return perr(codeBadRequest, `"records" must be an array of publish objects`)
	}
	if len(records) == 0 {
		return perr(codeBadRequest, `"records" must list 1 to %d records`, rt.opts.MaxPublishBatch)
	}
	if len(records) > rt.opts.MaxPublishBatch {
		rt.lim.limited.WithLabelValues(limitPublishBatchRecords).Inc()
		return perr(codeBadRequest, "a batch publish has %d records; the limit is %d, send the rest in further requests", len(records), rt.opts.MaxPublishBatch)
	}
	who := rt.principalOf(c)
	now := time.Now()
	results := make([]batchResult, len(records))
	var wg sync.WaitGroup
	ctx := rt.beginHTTPAppend(c.Request().Context())
	for i, raw := range records {
		var req request
		if !wire.DecodeFast(raw, &req) {
			req = request{}
			if err := json.Unmarshal(raw, &req); err != nil {
				pe := decodeBodyError(err, "a record")
				rt.m.rejected.WithLabelValues(pe.Code).Inc()
				results[i].err = pe
				continue
			}
		}
		msg, pe := rt.checkHTTPRecord(c, &req, who, now)
		if pe != nil {
			results[i].err = pe
			continue
		}
		results[i].topic = msg.Topic
		wg.Add(1)
		rt.appendAsync(ctx, msg, "http", func(a engine.Appended, err error) {
			results[i].a, results[i].err = a, err
			wg.Done()
		})
	}
	wg.Wait()
	err := rt.writeBatchResults(c, results)
	flushReply(c)
	rt.endHTTPAppend()
	return err
}

// writeBatchResults answers a batch: {"results":[…]} in request order.
func (rt *Router) writeBatchResults(c echo.Context, results []batchResult) error {
	b := make([]byte, 0, 16+64*len(results))
	b = append(b, `{"results":[`...)
	retry := false
	for i, r := range results {
		if i > 0 {
			b = append(b, ',')
		}
		if r.err != nil {
			code, msg, _ := classify(r.err)
			var pe *protoError
			if errors.As(r.err, &pe) {
				rt.countLimit(pe)
			}
			if code == codeInternal {
				rt.log.Error("batch publish record failed", "record", i, "err", r.err)
			}
			retry = retry || code == codeBackpressure || code == codeRateLimited
			b = append(b, `{"code":`...)
			b = appendJSONString(b, code)
			b = append(b, `,"message":`...)
			b = appendJSONString(b, capMessage(msg))
			b = append(b, '}')
			continue
		}
		b = append(b, `{"topic":`...)
		b = appendJSONString(b, r.topic)
		b = append(b, `,"partition":`...)
		b = strconv.AppendInt(b, int64(r.a.Partition), 10)
		b = append(b, `,"offset":`...)
		b = strconv.AppendInt(b, r.a.Offset, 10)
		if r.a.Duplicate {
			b = append(b, `,"duplicate":true`...)
		}
		b = append(b, '}')
	}
	b = append(b, "]}\n"...)
	if retry {
		c.Response().Header().Set("Retry-After", "1")
	}
	return c.JSONBlob(http.StatusOK, b)
}
