package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/internal/wire"
)

// messageJSON is how sub prints a delivery as JSON: the protocol's message
// frame.
type messageJSON struct {
	Op        string            `json:"op"`
	Pattern   string            `json:"pattern"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
	Data      json.RawMessage   `json:"data"`
	Encoding  string            `json:"encoding,omitempty"`
	Time      string            `json:"time"`
	Group     string            `json:"group,omitempty"`
	Attempt   int               `json:"attempt,omitempty"`
}

// gapJSON is how sub prints a gap as JSON: the protocol's gap frame.
type gapJSON struct {
	Op        string `json:"op"`
	Pattern   string `json:"pattern"`
	Group     string `json:"group,omitempty"`
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	From      int64  `json:"from"`
	To        int64  `json:"to"`
	Reason    string `json:"reason"`
}

// parseFrom turns --from into a client.From: earliest, latest, last,
// last:N (the newest N records of each partition), an RFC 3339 time or a
// duration before now ("10m", as --since).
func parseFrom(s string) (client.From, error) {
	switch s {
	case "":
		return client.From{}, nil
	case "earliest":
		return client.Earliest(), nil
	case "latest":
		return client.Latest(), nil
	case "last":
		return client.Last(), nil
	}
	if n, ok := strings.CutPrefix(s, "last:"); ok {
		v, err := strconv.Atoi(n)
		if err != nil || v < 1 {
			return client.From{}, usagef("--from %q: last:N needs a count of at least 1, such as last:10", s)
		}
		return client.Last(v), nil
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return client.FromTime(time.Now().Add(-d)), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return client.From{}, usagef("--from %q: want earliest, latest, last, last:N, a duration before now such as 10m, or an RFC 3339 time such as 2026-11-29T08:00:00Z", s)
	}
	return client.FromTime(t), nil
}

// runSub is `switchyard sub`: it reads and checks the flags, dials,
// subscribes and prints what arrives until interrupted, --count records
// or the end of the subscription.
func runSub(ctx context.Context, g *globals, args []string) error {
	req, err := parseSub(g, args)
	if err != nil {
		return err
	}
	u, err := g.wsURL()
	if err != nil {
		return err
	}
	c, gaps, deleted, err := dialSub(ctx, g, u)
	if err != nil {
		return err
	}
	defer c.Close()
	start := req.start
	if req.offset >= 0 {
		// Positions name the last offset seen: start at offset means
		// having seen offset-1; at 0, every partition starts at its
		// earliest record.
		var ps []client.Position
		if req.offset > 0 {
			ps = append(ps, client.Position{Topic: req.pattern, Partition: req.partition, Offset: req.offset - 1})
		}
		start = client.FromPositions(c.Welcome().Epoch, ps...)
	}
	sub, err := c.SubscribeChan(ctx, req.pattern, client.SubscribeOptions{Group: req.group, From: start, Filter: req.filter})
	if err != nil {
		return err
	}
	what := "subscribed to " + req.pattern
	if req.group != "" {
		what += " in group " + req.group
	}
	fmt.Fprintln(g.env.stderr, what)
	return printSub(ctx, g, req, sub, gaps, deleted)
}

// subRequest is what `switchyard sub` was asked for, checked.
type subRequest struct {
	pattern string
	group   string
	ack     bool // acknowledge each record once printed
	filter  keyValues
	count   int         // records to print before exiting; 0: no bound
	start   client.From // where to start, unless offset is set
	// partition and offset, both -1 when not given: start at offset in
	// this partition of the pattern's topic.
	partition int
	offset    int64
}

// parseSub reads sub's flags and checks how they combine.
func parseSub(g *globals, args []string) (subRequest, error) {
	fs := g.flagSet("sub")
	from := fs.String("from", "", "where to start: earliest, latest, last, last:N, a duration before now (10m) or an RFC 3339 time (default: the gateway's, latest; earliest for a new group)")
	since := fs.Duration("since", 0, "start with the records of this long ago, such as 10m (as --from 10m)")
	partition := fs.Int("partition", -1, "with --offset: the partition of the topic PATTERN to start in (its other partitions start at their earliest record)")
	offset := fs.Int64("offset", -1, "with --partition: the offset to start at")
	group := fs.String("group", "", "join this consumer group")
	ack := fs.Bool("ack", false, "with --group: acknowledge each record once printed (without it, records are redelivered after the ack timeout)")
	filter := keyValues{}
	fs.Var(filter, "filter", "deliver only records with this header, k=v (repeatable)")
	count := fs.Int("count", 0, "exit after this many records (0: until interrupted)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return subRequest{}, err
	}
	if len(pos) != 1 {
		return subRequest{}, usagef("sub needs a PATTERN")
	}
	if *ack && *group == "" {
		return subRequest{}, usagef("--ack needs --group")
	}
	if *since > 0 {
		if *from != "" {
			return subRequest{}, usagef("give --from or --since, not both")
		}
		*from = since.String()
	}
	if (*partition >= 0) != (*offset >= 0) {
		return subRequest{}, usagef("--partition and --offset go together")
	}
	if *offset >= 0 && *from != "" {
		return subRequest{}, usagef("give --from, --since or --partition with --offset, one of them")
	}
	start, err := parseFrom(*from)
	if err != nil {
		return subRequest{}, err
	}
	return subRequest{pattern: pos[0], group: *group, ack: *ack, filter: filter, count: *count,
		start: start, partition: *partition, offset: *offset}, nil
}

// dialSub dials the gateway at u for sub. Gaps and deleted topics arrive
// on the client's dispatcher goroutine, as messages do: they are handed
// to printSub through the channels returned, so that output lines never
// interleave (a gap past the channel's room, and every deleted topic
// after the first, which ends the command, are printed to stderr or
// dropped). Resets and disconnections are told on stderr.
func dialSub(ctx context.Context, g *globals, u string) (*client.Client, <-chan client.Gap, <-chan client.TopicDeleted, error) {
	gaps := make(chan client.Gap, 64)
	deleted := make(chan client.TopicDeleted, 1)
	c, err := client.Dial(ctx, u, &client.Options{
		Token: g.wsToken(),
		OnTopicDeleted: func(d client.TopicDeleted) {
			select {
			case deleted <- d:
			default: // the first one ends the command
			}
		},
		RequestTimeout: g.timeout,
		OnGap: func(gp client.Gap) {
			select {
			case gaps <- gp:
			default:
				fmt.Fprintf(g.env.stderr, "gap %s [%d] offsets %d..%d (%s)\n", gp.Topic, gp.Partition, gp.From, gp.To, gp.Reason)
			}
		},
		OnReset: func(r client.Reset) {
			fmt.Fprintf(g.env.stderr, "subscription %s restarted at the earliest retained record\n", r.Pattern)
		},
		OnState: func(st client.State, err error) {
			if st == client.StateDisconnected {
				fmt.Fprintf(g.env.stderr, "disconnected (%v); reconnecting\n", err)
			}
		},
	})
	return c, gaps, deleted, err
}

// printSub prints the records of sub (acknowledging each once printed
// with req.ack) and the gaps, as JSON lines or readable lines, until ctx
// ends, req.count records are printed, a topic is deleted or the
// subscription ends.
func printSub(ctx context.Context, g *globals, req subRequest, sub *client.Subscription, gaps <-chan client.Gap, deleted <-chan client.TopicDeleted) error {
	jsonOut := g.jsonOut()
	n := 0
	for {
		select {
		case <-ctx.Done():
			return nil
		case gp := <-gaps:
			if jsonOut {
				_ = g.emit(gapJSON{wire.OpGap, gp.Pattern, gp.Group, gp.Topic, gp.Partition, gp.From, gp.To, gp.Reason})
			} else {
				fmt.Fprintf(g.env.stderr, "gap %s [%d] offsets %d..%d not delivered (%s)\n", gp.Topic, gp.Partition, gp.From, gp.To, gp.Reason)
			}
		case d := <-deleted:
			if jsonOut {
				_ = g.emit(map[string]string{"op": wire.OpTopicDeleted, "pattern": d.Pattern, "topic": d.Topic})
			}
			return fmt.Errorf("topic %s was deleted", d.Topic)
		case m, ok := <-sub.C:
			if !ok {
				return errors.New("the subscription ended")
			}
			var err error
			if jsonOut {
				err = g.emit(messageJSON{wire.OpMessage, m.Pattern, m.Topic, m.Partition, m.Offset, m.Key, m.Headers, m.Data, m.Encoding, m.Time.UTC().Format(wire.TimeFormat), m.Group, m.Attempt})
			} else {
				err = printMessage(g.env.stdout, m)
			}
			if err != nil {
				return err
			}
			if req.ack {
				if err := m.Ack(ctx); err != nil {
					return fmt.Errorf("ack %s [%d] #%d: %w", m.Topic, m.Partition, m.Offset, err)
				}
			}
			n++
			if req.count > 0 && n >= req.count {
				return nil
			}
		}
	}
}

// printMessage prints a delivery as one readable line:
//
//	08:00:00.123 orders.created [0] #5 key=customer-7 region=eu {"id":42}
func printMessage(w io.Writer, m *client.Message) error {
	var b strings.Builder
	b.WriteString(m.Time.Local().Format("15:04:05.000"))
	fmt.Fprintf(&b, " %s [%d] #%d", m.Topic, m.Partition, m.Offset)
	if m.Group != "" {
		fmt.Fprintf(&b, " attempt=%d", m.Attempt)
	}
	if m.Key != "" {
		b.WriteString(" key=" + m.Key)
	}
	keys := make([]string, 0, len(m.Headers))
	for k := range m.Headers {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString(" " + k + "=" + m.Headers[k])
	}
	b.WriteByte(' ')
	b.Write(m.Data)
	b.WriteByte('\n')
	_, err := io.WriteString(w, b.String())
	return err
}

// jsonData returns s as a JSON value: s itself when it is valid JSON,
// otherwise s as a JSON string, so `pub t hello` publishes "hello".
func jsonData(s string) json.RawMessage {
	if json.Valid([]byte(s)) {
		return json.RawMessage(strings.TrimSpace(s))
	}
	b, _ := json.Marshal(s)
	return b
}

func runPub(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("pub")
	key := fs.String("key", "", "record key: records with one key go to one partition, in order")
	headers := keyValues{}
	fs.Var(headers, "header", "record header k=v (repeatable)")
	msgID := fs.String("msg-id", "", "idempotency key; reading stdin, the n-th record gets ID-n")
	priority := fs.Int("priority", -1, "priority 0 (lowest) to 3 (default: the gateway's, 1)")
	batch := fs.Int("batch", 0, "reading stdin: send up to N lines per HTTP batch publish (POST /v1/publish {\"records\":[…]}, at most 1000); 0: one WebSocket publish per line")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("pub needs a TOPIC")
	}
	if *priority > 3 {
		return usagef("--priority must be 0 to 3")
	}
	if *batch < 0 || *batch > 1000 {
		return usagef("--batch must be 0 to 1000")
	}
	opts := func(id string) []client.PublishOption {
		var o []client.PublishOption
		if *key != "" {
			o = append(o, client.WithKey(*key))
		}
		if len(headers) > 0 {
			o = append(o, client.WithHeaders(headers))
		}
		if id != "" {
			o = append(o, client.WithMsgID(id))
		}
		if *priority >= 0 {
			o = append(o, client.WithPriority(*priority))
		}
		return o
	}
	topic := pos[0]
	stdin := len(pos) < 2 || pos[1] == "-"
	if stdin && *batch > 0 {
		rec := batchRecord{Topic: topic, Key: *key, Headers: headers}
		if *priority >= 0 {
			rec.Priority = priority
		}
		return g.pubBatches(ctx, rec, *msgID, *batch)
	}
	c, err := g.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	publish := func(data json.RawMessage, id string) error {
		res, err := c.Publish(ctx, topic, data, opts(id)...)
		if err != nil {
			return err
		}
		return g.printPublished(res)
	}
	if !stdin {
		return publish(jsonData(pos[1]), *msgID)
	}
	// One record per line of stdin; blank lines are skipped.
	g.stdinHint()
	sc := bufio.NewScanner(g.env.stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		line++
		id := ""
		if *msgID != "" {
			id = fmt.Sprintf("%s-%d", *msgID, line)
		}
		if err := publish(jsonData(text), id); err != nil {
			return &lineError{line, err}
		}
	}
	return sc.Err()
}

// printPublished prints one stored record's position.
func (g *globals) printPublished(res client.PublishResult) error {
	if g.jsonOut() {
		return g.emit(struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			Offset    int64  `json:"offset"`
			Duplicate bool   `json:"duplicate,omitempty"`
		}{res.Topic, res.Partition, res.Offset, res.Duplicate})
	}
	dup := ""
	if res.Duplicate {
		dup = " (duplicate)"
	}
	g.printf("%s [%d] #%d%s\n", res.Topic, res.Partition, res.Offset, dup)
	return nil
}

// stdinHint tells a terminal user that records are read from it.
func (g *globals) stdinHint() {
	if g.env.ttyIn {
		fmt.Fprintln(g.env.stderr, "reading records from the terminal, one per line; end with Ctrl-D (or give DATA after the topic to publish one record)")
	}
}

// batchRecord is one record of a batch publish.
type batchRecord struct {
	Topic    string            `json:"topic"`
	Data     json.RawMessage   `json:"data"`
	Key      string            `json:"key,omitempty"`
	Headers  map[string]string `json:"headers,omitempty"`
	MsgID    string            `json:"msg_id,omitempty"`
	Priority *int              `json:"priority,omitempty"`
}

// pubBatches publishes the lines of stdin (blank ones skipped) in batches
// of up to n records with POST /v1/publish, printing each record's
// position in order. It stops after the first batch with a refused
// record and reports the first such record's line (the batch's other
// records are stored and printed).
func (g *globals) pubBatches(ctx context.Context, proto batchRecord, msgID string, n int) error {
	g.stdinHint()
	sc := bufio.NewScanner(g.env.stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	recs := make([]batchRecord, 0, n)
	send := func() error {
		if len(recs) == 0 {
			return nil
		}
		var out struct {
			Results []struct {
				Topic     string `json:"topic"`
				Partition int    `json:"partition"`
				Offset    int64  `json:"offset"`
				Duplicate bool   `json:"duplicate"`
				Code      string `json:"code"`
				Message   string `json:"message"`
			} `json:"results"`
		}
		first := line - len(recs) + 1
		if err := g.call(ctx, "POST", "/v1/publish", nil, map[string]any{"records": recs}, &out); err != nil {
			return &lineError{first, err}
		}
		if len(out.Results) != len(recs) {
			return fmt.Errorf("lines %d to %d: the gateway answered %d results for %d records", first, line, len(out.Results), len(recs))
		}
		var refused error
		for i, r := range out.Results {
			if r.Code != "" {
				if refused == nil {
					refused = &lineError{first + i, &apiError{Method: "POST", Path: "/v1/publish", Status: 200, Code: r.Code, Message: r.Message}}
				}
				continue
			}
			if err := g.printPublished(client.PublishResult{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Duplicate: r.Duplicate}); err != nil {
				return err
			}
		}
		recs = recs[:0]
		return refused
	}
	for sc.Scan() {
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		line++
		rec := proto
		rec.Data = jsonData(text)
		if msgID != "" {
			rec.MsgID = fmt.Sprintf("%s-%d", msgID, line)
		}
		recs = append(recs, rec)
		if len(recs) == n {
			if err := send(); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return send()
}

// lineError is a failed publish of one line of stdin.
type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %v", e.line, e.err) }
func (e *lineError) Unwrap() error { return e.err }
