package router

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/trie"
)

func (rt *Router) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner = true
	e.HidePort = true
	e.HTTPErrorHandler = rt.errorHandler
	e.IPExtractor = clientIPExtractor(rt.opts.TrustedProxies)
	e.Pre(rt.crossSite)
	e.Use(rt.authAPI)

	admin, group := rt.requireAdmin, rt.requireGroup
	e.GET("/v1/ws", rt.serveWS)
	e.GET("/v1/sse", rt.serveSSE)
	e.GET("/mqtt", rt.serveMQTTWS)
	e.POST("/v1/publish", rt.httpPublish)
	e.POST("/v1/topics", rt.httpCreateTopic, admin)
	e.GET("/v1/topics", rt.httpTopics)
	e.GET("/v1/topics/:name", rt.httpTopic)
	e.DELETE("/v1/topics/:name", rt.httpDeleteTopic, admin)
	e.GET("/v1/topics/:name/messages", rt.httpMessages)
	e.GET("/v1/presence/:topic", rt.httpPresence)
	e.GET("/v1/groups", rt.httpGroups)
	e.GET("/v1/groups/:group", rt.httpGroup, group)
	e.POST("/v1/groups/:group/seek", rt.httpSeek, admin)
	e.DELETE("/v1/groups/:group", rt.httpDeleteGroup, admin)
	e.POST("/v1/groups/:group/poll", rt.httpPoll, rt.requirePoll)
	e.POST("/v1/groups/:group/ack", rt.httpAck, group)
	e.POST("/v1/groups/:group/nack", rt.httpAck, group)
	e.GET("/v1/deadletters", rt.httpDeadLetters, admin)
	e.POST("/v1/deadletters/redrive", rt.httpRedrive, admin)
	rt.sessionRoutes(e, admin)
	rt.apiDocRoutes(e)
	rt.ticketRoutes(e)
	e.GET("/metrics", echo.WrapHandler(promhttp.HandlerFor(rt.opts.Registry, promhttp.HandlerOpts{})))
	e.GET("/healthz", func(c echo.Context) error {
		return c.JSON(http.StatusOK, map[string]string{"status": "ok", "version": rt.opts.Version})
	})
	e.GET("/readyz", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := rt.Ready(ctx); err != nil {
			code, msg, _ := classify(err)
			return c.JSON(http.StatusServiceUnavailable, map[string]string{"code": code, "message": msg})
		}
		return c.JSON(http.StatusOK, map[string]string{"status": "ready"})
	})
	if rt.opts.Static != nil {
		files := http.FileServer(http.FS(rt.opts.Static))
		e.GET("/*", echo.WrapHandler(files))
		e.GET("/v1/*", rt.notFound) // the API's JSON 404, not the file server's
	} else {
		e.GET("/", func(c echo.Context) error {
			return c.String(http.StatusOK, "Switchyard gateway\n")
		})
	}
	return e
}

// bind decodes a JSON body into v under the body limit.
func (rt *Router) bind(c echo.Context, v any) error {
	body := http.MaxBytesReader(c.Response(), c.Request().Body, rt.opts.MaxBodyBytes)
	data, err := io.ReadAll(body)
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return perr(codeTooLarge, "request body is larger than %d bytes", rt.opts.MaxBodyBytes)
		}
		return perr(codeBadRequest, "reading body: %v", err)
	}
	if err := json.Unmarshal(data, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			if te.Field == "" {
				return perr(codeBadRequest, "body must be a JSON object")
			}
			return perr(codeBadRequest, "field %q has the wrong type (want %s)", te.Field, te.Type.String())
		}
		return perr(codeBadRequest, "body is not valid JSON")
	}
	return nil
}

// topicJSON is the HTTP shape of a topic.
type topicJSON struct {
	Name         string          `json:"name"`
	Partitions   int             `json:"partitions"`
	Retention    retentionJSON   `json:"retention"`
	OnFull       string          `json:"on_full"`
	Partitioner  string          `json:"partitioner"`
	BlockTimeout string          `json:"block_timeout"`
	Created      string          `json:"created"`
	Offsets      []partitionJSON `json:"offsets"`
	Policy       string          `json:"policy,omitempty"` // the topic policy whose settings it has (topic_policies.go)
}

type retentionJSON struct {
	MaxMessages int64   `json:"max_messages"`
	MaxAge      *string `json:"max_age"` // null: no age limit
}

type partitionJSON struct {
	Partition int   `json:"partition"`
	Earliest  int64 `json:"earliest"`
	Next      int64 `json:"next"`
	Bytes     int64 `json:"bytes"`
	Dropped   int64 `json:"dropped"`
}

func topicView(t engine.TopicInfo) topicJSON {
	out := topicJSON{
		Name:         t.Config.Name,
		Partitions:   t.Config.Partitions,
		Retention:    retentionJSON{MaxMessages: t.Config.MaxMessages},
		OnFull:       string(t.Config.OnFull),
		Partitioner:  string(t.Config.Partitioner),
		BlockTimeout: t.Config.BlockTimeout.String(),
		Created:      t.Created.UTC().Format(timeFormat),
		Offsets:      make([]partitionJSON, 0, len(t.Parts)),
	}
	if t.Config.MaxAge > 0 {
		s := t.Config.MaxAge.String()
		out.Retention.MaxAge = &s
	}
	for _, p := range t.Parts {
		out.Offsets = append(out.Offsets, partitionJSON(p))
	}
	return out
}

func (rt *Router) httpCreateTopic(c echo.Context) error {
	var req struct {
		Name       *string `json:"name"`
		Partitions int     `json:"partitions"`
		Retention  struct {
			MaxMessages int64  `json:"max_messages"`
			MaxAge      string `json:"max_age"`
		} `json:"retention"`
		OnFull       string `json:"on_full"`
		Partitioner  string `json:"partitioner"`
		BlockTimeout string `json:"block_timeout"`
	}
	if err := rt.bind(c, &req); err != nil {
		return err
	}
	if req.Name == nil {
		return perr(codeBadRequest, `missing field "name"`)
	}
	if pe := validTopic(&rt.opts.Bounds, *req.Name); pe != nil {
		return pe
	}
	if trie.IsSystem(*req.Name) {
		return perr(codeForbidden, "topics starting with $ are reserved for the server")
	}
	cfg := engine.TopicConfig{
		Name:        *req.Name,
		Partitions:  req.Partitions,
		MaxMessages: req.Retention.MaxMessages,
		OnFull:      engine.FullPolicy(req.OnFull),
		Partitioner: engine.PartitionerKind(req.Partitioner),
	}
	if req.Partitions < 0 {
		return perr(codeBadRequest, "partitions must be 1 to %d", engine.MaxPartitions)
	}
	if req.Partitions > rt.opts.MaxPartitions {
		rt.lim.limited.WithLabelValues("partitions").Inc()
		return perr(codeBadRequest, "partitions must be 1 to %d", rt.opts.MaxPartitions)
	}
	var err error
	if cfg.MaxAge, err = parseDuration("retention.max_age", req.Retention.MaxAge); err != nil {
		return err
	}
	if cfg.BlockTimeout, err = parseDuration("block_timeout", req.BlockTimeout); err != nil {
		return err
	}
	if err := rt.roomForTopic(c.Request().Context()); err != nil {
		return err
	}
	info, err := rt.eng.CreateTopic(c.Request().Context(), cfg)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, topicView(info))
}

func parseDuration(field, s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		return 0, perr(codeBadRequest, "%s must be a duration such as \"90s\" or \"24h\"", field)
	}
	return d, nil
}

// httpTopics serves one page of the topics, in name order (see paging.go):
// the engine builds only that page.
func (rt *Router) httpTopics(c echo.Context) error {
	pr, err := parsePage(c)
	if err != nil {
		return err
	}
	pw := newPageWriter("topics", pr.limit)
	ctx := c.Request().Context()
	err = fillPage(pw, pr.after, func(after string, limit int) ([]engine.TopicInfo, bool, error) {
		return rt.eng.TopicsPage(ctx, after, limit)
	}, func(t engine.TopicInfo) string { return t.Config.Name }, func(t engine.TopicInfo) any {
		v := topicView(t)
		v.Policy = rt.policyOf(t)
		return v
	})
	if err != nil {
		return err
	}
	return pw.send(c)
}

func (rt *Router) httpTopic(c echo.Context) error {
	t, err := rt.eng.Topic(c.Request().Context(), param(c, "name"))
	if err != nil {
		return err
	}
	v := topicView(t)
	v.Policy = rt.policyOf(t)
	return c.JSON(http.StatusOK, v)
}

func (rt *Router) httpDeleteTopic(c echo.Context) error {
	name := param(c, "name")
	if trie.IsSystem(name) {
		return perr(codeForbidden, "system topics cannot be deleted")
	}
	if err := rt.eng.DeleteTopic(c.Request().Context(), name); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// recordJSON is the HTTP shape of a stored record.
type recordJSON struct {
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Data      json.RawMessage   `json:"data"`
	Encoding  string            `json:"encoding,omitempty"` // "base64" for bytes that are not JSON
	Time      string            `json:"time"`
	Group     string            `json:"group,omitempty"`
	Attempt   int               `json:"attempt,omitempty"`
}

func recordView(r *engine.Record) recordJSON {
	data, enc := wire.DataField(r.Data, wire.IsBinary(r.Headers))
	return recordJSON{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key,
		Headers: wire.UserHeaders(r.Headers), Data: data, Encoding: enc, Time: r.Time.UTC().Format(timeFormat)}
}

func queryInt(c echo.Context, name string, def int64) (int64, error) {
	s := c.QueryParam(name)
	if s == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, perr(codeBadRequest, "query parameter %q must be an integer", name)
	}
	return n, nil
}

func (rt *Router) httpMessages(c echo.Context) error {
	partition, err := queryInt(c, "partition", 0)
	if err != nil {
		return err
	}
	from, err := queryInt(c, "from", 0)
	if err != nil {
		return err
	}
	limit, err := queryInt(c, "limit", 100)
	if err != nil {
		return err
	}
	if limit < 1 || limit > 1000 || partition < 0 || from < 0 {
		return perr(codeBadRequest, "limit must be 1 to 1000; partition and from must not be negative")
	}
	name := param(c, "name")
	if p := rt.principalOf(c); !p.Admin {
		if err := trie.ValidateTopic(name); err != nil {
			return perr(codeInvalidTopic, "%s", err.Error())
		}
		if !p.CanSubscribe(name) {
			return rt.forbidden("subscribe", "not allowed to read %q", name)
		}
	}
	recs, next, err := rt.eng.Read(c.Request().Context(), name, int(partition), from, int(limit))
	if err != nil {
		return err
	}
	out := make([]recordJSON, 0, len(recs))
	for _, r := range recs {
		out = append(out, recordView(r))
	}
	return c.JSON(http.StatusOK, map[string]any{"messages": out, "next": next})
}

// groupJSON is the HTTP (and $sys.groups) shape of a group.
type groupJSON struct {
	Name    string            `json:"name"`
	Pattern string            `json:"pattern"`
	Filter  map[string]string `json:"filter,omitempty"`
	// MaxInFlight is the group's window per partition.
	MaxInFlight int                  `json:"max_in_flight"`
	Members     []memberJSON         `json:"members"`
	Partitions  []groupPartitionJSON `json:"partitions"`
	Lag         int64                `json:"lag"`
}

type memberJSON struct {
	ID         string     `json:"id"`
	Partitions []partJSON `json:"partitions"`
}

type partJSON struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
}

type groupPartitionJSON struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Member    string `json:"member"`
	Committed int64  `json:"committed"`
	Next      int64  `json:"next"`
	Lag       int64  `json:"lag"`
	InFlight  int    `json:"in_flight"`
	Skipped   int64  `json:"skipped"`
}

func groupView(g engine.GroupInfo) groupJSON {
	out := groupJSON{Name: g.Name, Pattern: g.Pattern, Filter: g.Filter, MaxInFlight: g.MaxInFlight,
		Members: make([]memberJSON, 0, len(g.Members)), Partitions: make([]groupPartitionJSON, 0, len(g.Partitions))}
	for _, m := range g.Members {
		mj := memberJSON{ID: m.ID, Partitions: make([]partJSON, 0, len(m.Partitions))}
		for _, p := range m.Partitions {
			mj.Partitions = append(mj.Partitions, partJSON{p.Topic, p.Partition})
		}
		out.Members = append(out.Members, mj)
	}
	for _, p := range g.Partitions {
		out.Partitions = append(out.Partitions, groupPartitionJSON(p))
		out.Lag += p.Lag
	}
	return out
}

// httpGroups serves one page of the groups, in name order (see paging.go):
// the engine builds only that page.
func (rt *Router) httpGroups(c echo.Context) error {
	pr, err := parsePage(c)
	if err != nil {
		return err
	}
	pw := newPageWriter("groups", pr.limit)
	ctx := c.Request().Context()
	err = fillPage(pw, pr.after, func(after string, limit int) ([]engine.GroupInfo, bool, error) {
		return rt.eng.GroupsPage(ctx, after, limit)
	}, func(g engine.GroupInfo) string { return g.Name }, func(g engine.GroupInfo) any { return groupView(g) })
	if err != nil {
		return err
	}
	return pw.send(c)
}

func (rt *Router) httpGroup(c echo.Context) error {
	g, err := rt.eng.Group(c.Request().Context(), param(c, "group"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, groupView(g))
}

func (rt *Router) httpSeek(c echo.Context) error {
	var req struct {
		Topic     *string `json:"topic"`
		Partition *int    `json:"partition"`
		Offset    *int64  `json:"offset"`
		Time      *string `json:"time"`
	}
	if err := rt.bind(c, &req); err != nil {
		return err
	}
	if req.Topic == nil {
		return perr(codeBadRequest, `missing field "topic"`)
	}
	partition := -1
	if req.Partition != nil {
		if *req.Partition < 0 {
			return perr(codeBadRequest, "partition must not be negative")
		}
		partition = *req.Partition
	}
	var to engine.Start
	switch {
	case req.Offset != nil && req.Time != nil:
		return perr(codeBadRequest, `give "offset" or "time", not both`)
	case req.Offset != nil:
		if *req.Offset < 0 {
			return perr(codeBadRequest, "offset must not be negative")
		}
		to = engine.Start{Kind: engine.StartOffset, Offset: *req.Offset}
	case req.Time != nil:
		t, err := time.Parse(time.RFC3339Nano, *req.Time)
		if err != nil {
			return perr(codeBadRequest, "time must be RFC3339")
		}
		to = engine.Start{Kind: engine.StartTime, Time: t}
	default:
		return perr(codeBadRequest, `missing field "offset" or "time"`)
	}
	group := param(c, "group")
	if err := rt.seek(c.Request().Context(), group, *req.Topic, partition, to); err != nil {
		return err
	}
	g, err := rt.eng.Group(c.Request().Context(), group)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, groupView(g))
}

type deadLetterJSON struct {
	ID         string            `json:"id"`
	Reason     string            `json:"reason"`
	Group      string            `json:"group,omitempty"`
	Subscriber string            `json:"subscriber,omitempty"`
	Topic      string            `json:"topic"`
	Partition  int               `json:"partition"`
	Offset     int64             `json:"offset"`
	Key        string            `json:"key,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Attempts   int               `json:"attempts"`
	Error      string            `json:"error"`
	Time       string            `json:"time"`
	Data       json.RawMessage   `json:"data"`
	Encoding   string            `json:"encoding,omitempty"` // "base64" for bytes that are not JSON
}

// httpDeadLetters serves one page of the dead letters, oldest first (see
// paging.go).
func (rt *Router) httpDeadLetters(c echo.Context) error {
	pr, err := parsePage(c)
	if err != nil {
		return err
	}
	reason := c.QueryParam("reason")
	if reason != "" && reason != engine.ReasonMaxAttempts && reason != engine.ReasonQueueFull {
		return perr(codeBadRequest, `reason must be "max_attempts" or "queue_full"`)
	}
	f := engine.DeadLetterFilter{Group: c.QueryParam("group"), Reason: reason}
	if pr.after == "" {
		f.Limit = pr.limit + 1 // one more tells whether a next page exists
	}
	dls, err := rt.eng.DeadLetters(c.Request().Context(), f)
	if err != nil {
		return err
	}
	pw := newPageWriter("deadletters", pr.limit)
	start := startAfterDeadLetter(len(dls), func(i int) string { return dls[i].ID },
		func(i int) time.Time { return dls[i].Time }, pr.after)
	for _, d := range dls[start:] {
		data, enc := wire.DataField(d.Record.Data, wire.IsBinary(d.Record.Headers))
		if len(d.Record.Data) == 0 {
			data, enc = json.RawMessage("null"), ""
		}
		v := deadLetterJSON{ID: d.ID, Reason: d.Reason, Group: d.Group, Subscriber: d.Subscriber,
			Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset, Key: d.Record.Key,
			Headers: wire.UserHeaders(d.Record.Headers), Attempts: d.Attempts, Error: d.Error,
			Time: d.Time.UTC().Format(timeFormat), Data: data, Encoding: enc}
		if ok, err := pw.add(deadLetterCursor(d.Time, d.ID), v); err != nil || !ok {
			if err != nil {
				return err
			}
			break
		}
	}
	return pw.send(c)
}

// MaxRedriveIDs bounds the ids of one POST /v1/deadletters/redrive, so that
// a request costs what it returns: 1000 ids fit in well under the body
// limit and match the largest listing page, which is where ids come from.
const MaxRedriveIDs = 1000

// httpRedrive hands dead letters back: a group's letters to that group
// only, at their own offsets (nothing is appended); letters that cannot go
// back in place (queue_full ones, or records retention trimmed) are
// appended to their topics again only with "append_to_topics": true.
func (rt *Router) httpRedrive(c echo.Context) error {
	var req struct {
		Group          string   `json:"group"`
		IDs            []string `json:"ids"`
		AppendToTopics bool     `json:"append_to_topics"`
	}
	var fields map[string]json.RawMessage
	if err := rt.bind(c, &fields); err != nil {
		return err
	}
	for k := range fields {
		if k != "group" && k != "ids" && k != "append_to_topics" {
			return perr(codeBadRequest, `unknown field %q: a redrive takes "group", "ids" and "append_to_topics"`, k)
		}
	}
	if err := unmarshalFields(fields, &req); err != nil {
		return err
	}
	if req.Group == "" && len(req.IDs) == 0 {
		return perr(codeBadRequest, `give "group" (all of its dead letters), "ids" or both`)
	}
	if len(req.IDs) > MaxRedriveIDs {
		rt.lim.limited.WithLabelValues("redrive_ids").Inc()
		return perr(codeBadRequest, "at most %d ids per redrive request; send the rest in further requests", MaxRedriveIDs)
	}
	n, err := rt.eng.Redrive(c.Request().Context(), engine.RedriveRequest{Group: req.Group, IDs: req.IDs, AppendToTopics: req.AppendToTopics})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, map[string]any{"redriven": n})
}

// unmarshalFields decodes the fields of a body already read as an object
// into v, naming a field of the wrong type.
func unmarshalFields(fields map[string]json.RawMessage, v any) error {
	b, _ := json.Marshal(fields)
	if err := json.Unmarshal(b, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			return perr(codeBadRequest, "field %q has the wrong type (want %s)", te.Field, te.Type.String())
		}
		return perr(codeBadRequest, "body is not valid JSON")
	}
	return nil
}

// clientIPExtractor returns the TCP peer's address as the client IP, or
// the X-Forwarded-For address its trusted proxies name.
func clientIPExtractor(trusted []*net.IPNet) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, n := range trusted {
		opts = append(opts, echo.TrustIPRange(n))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// param returns a path parameter with its percent-encoding undone (a
// browser sends "$sys.stats" as "%24sys.stats").
func param(c echo.Context, name string) string {
	v := c.Param(name)
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}
