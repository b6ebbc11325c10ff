package main

// The torture run's consumer groups and its other disturbances. The group
// under check ("tgrp" over the tg.* topics) has WebSocket members that ack,
// nack, stall (let the ack timeout pass) and crash, and an HTTP pull
// member; the group books (groupLedger) check invariant 3 of torture.go:
// every acknowledged record of the group's topics is acked by some member
// or dead-lettered, no record's ack is confirmed twice, and no record is
// delivered again after its ack was confirmed (a later attempt).
//
// The disturbances: a stalled member of a second group, which keeps the
// Block topic full (so that publishes to it wait, see sameIDPublishers);
// non-readers killed abruptly while the gateway's keepalive ping is
// outstanding; connections killed in the middle of a frame; presence
// churn; and topic deletes and re-creates.

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
)

const (
	tortureGroup      = "tgrp"
	tortureGroupPat   = "tg.*"
	tortureBlockGroup = "tbgrp"
)

// grec is the group's history of one record.
type grec struct {
	acks         int
	ackedAttempt int
}

// groupLedger is the group books. It is safe for concurrent use.
type groupLedger struct {
	mu   sync.Mutex // guards following
	recs map[pkey]*grec

	deliveries  atomic.Int64
	acks        atomic.Int64
	unconfirmed atomic.Int64 // settled by an ack whose confirmation was lost
	v           violations
}

func (g *groupLedger) rec(k pkey) *grec {
	r := g.recs[k]
	if r == nil {
		r = &grec{}
		g.recs[k] = r
	}
	return r
}

// delivered checks a delivery of k's attempt.
func (g *groupLedger) delivered(k pkey, attempt int) {
	g.deliveries.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rec(k)
	if r.acks > 0 && attempt > r.ackedAttempt {
		g.v.add("%s/%d offset %d delivered (attempt %d) after its ack of attempt %d was confirmed", k.topic, k.part, k.off(), attempt, r.ackedAttempt)
	}
}

// acked records a confirmed ack of k's attempt.
func (g *groupLedger) acked(k pkey, attempt int) {
	g.acks.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rec(k)
	r.acks++
	if r.acks > 1 {
		g.v.add("%s/%d offset %d: ack confirmed twice (attempts %d and %d)", k.topic, k.part, k.off(), r.ackedAttempt, attempt)
	}
	r.ackedAttempt = attempt
}

// off is the offset a group key carries in its gen field (the group's
// topics are never deleted, so the field is free).
func (k pkey) off() int64 { return k.gen }

func gkey(topic string, part int, off int64) pkey { return pkey{topic: topic, gen: off, part: part} }

// unsettled checks, at the end, every acknowledged record of the group's
// topics against the acks and dead letters; it returns how many are
// neither, and reports them when report.
func (tr *torture) unsettled(ctx context.Context, report bool) (int64, error) {
	dead, err := tr.deadLetters(ctx)
	if err != nil {
		return 0, err
	}
	committed, err := tr.committed(ctx)
	if err != nil {
		return 0, err
	}
	var n, unconfirmed int64
	g := tr.groups
	for _, pl := range tr.l.matching(tortureGroupPat) {
		pl.mu.Lock()
		entries := append([]entry(nil), pl.entries...)
		pl.mu.Unlock()
		for _, e := range entries {
			k := gkey(pl.key.topic, pl.key.part, e.off)
			g.mu.Lock()
			r := g.recs[k]
			acked := r != nil && r.acks > 0
			g.mu.Unlock()
			switch {
			case acked && dead[k]:
				g.v.add("%s/%d offset %d both acked and dead-lettered", k.topic, k.part, e.off)
			case !acked && !dead[k] && e.off < committed[pkey{topic: k.topic, part: k.part}]:
				// Acked, but the member was killed before it read the
				// confirmation: the group committed past it.
				unconfirmed++
			case !acked && !dead[k]:
				if report && n < 3 {
					g.v.add("%s/%d offset %d neither acked nor dead-lettered", k.topic, k.part, e.off)
				}
				n++
			}
		}
	}
	if report && n > 3 {
		g.v.add("%d records in all neither acked nor dead-lettered", n)
	}
	g.unconfirmed.Store(unconfirmed)
	return n, nil
}

// committed reads the group's committed offset of every partition.
func (tr *torture) committed(ctx context.Context) (map[pkey]int64, error) {
	body, status, err := tr.do(ctx, http.MethodGet, "/v1/groups/"+tortureGroup, nil)
	if err != nil || status != http.StatusOK {
		return nil, fmt.Errorf("group: status %d: %v", status, err)
	}
	var g struct {
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			Committed int64  `json:"committed"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(body, &g); err != nil {
		return nil, fmt.Errorf("group: %w", err)
	}
	out := map[pkey]int64{}
	for _, p := range g.Partitions {
		out[pkey{topic: p.Topic, part: p.Partition}] = p.Committed
	}
	return out, nil
}

// deadLetters reads the group's dead letters, every page.
func (tr *torture) deadLetters(ctx context.Context) (map[pkey]bool, error) {
	out := map[pkey]bool{}
	cursor := ""
	for range 1000 {
		path := "/v1/deadletters?limit=1000&group=" + tortureGroup
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		body, status, err := tr.do(ctx, http.MethodGet, path, nil)
		if err != nil || status != http.StatusOK {
			return nil, fmt.Errorf("dead letters: status %d: %v", status, err)
		}
		var page struct {
			DeadLetters []struct {
				Topic     string `json:"topic"`
				Partition int    `json:"partition"`
				Offset    int64  `json:"offset"`
			} `json:"deadletters"`
			Next string `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("dead letters: %w", err)
		}
		for _, d := range page.DeadLetters {
			out[gkey(d.Topic, d.Partition, d.Offset)] = true
		}
		if page.Next == "" {
			return out, nil
		}
		cursor = page.Next
	}
	return out, nil
}

// member is a WebSocket member of the group until ctx ends. Until stop it
// nacks, stalls and crashes at random; after it, it acks everything.
func (tr *torture) member(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	nd := tr.gw.pick(rng)
	for ctx.Err() == nil {
		conn, _, err := dialGateway(ctx, nd.wsURL, false)
		if err != nil {
			tr.dialErrors.Add(1)
			pause(ctx, 100*time.Millisecond)
			continue
		}
		var mu sync.Mutex // guards following
		ids := map[string]struct {
			k       pkey
			attempt int
		}{}
		next := 0
		crash := make(chan struct{})
		var crashOnce sync.Once
		settle := func(op string, k pkey, attempt int) {
			mu.Lock()
			next++
			id := op[:1] + strconv.Itoa(next)
			if op == "ack" {
				ids[id] = struct {
					k       pkey
					attempt int
				}{k, attempt}
			}
			mu.Unlock()
			b := fmt.Appendf(nil, `{"op":%q,"id":%q,"group":%q,"topic":%q,"partition":%d,"offset":%d}`, op, id, tortureGroup, k.topic, k.part, k.off())
			_ = conn.Write(ctx, websocket.MessageText, b)
		}
		readerDone := make(chan struct{})
		go func() { // exits when the connection ends
			defer close(readerDone)
			_ = readFrames(ctx, conn, func(l []byte) bool {
				switch {
				case isOp(l, opMessage):
					topic := stringAfter(l, keyTopic)
					part, _ := intAfter(l, keyPartition)
					off, _ := intAfter(l, keyOffset)
					attempt, _ := intAfter(l, keyAttempt)
					k := gkey(topic, int(part), off)
					tr.groups.delivered(k, int(attempt))
					r := rng.IntN(100)
					if stopped(ctx, stop) {
						r = 99
					}
					switch {
					case r < 1:
						crashOnce.Do(func() { close(crash) })
					case r < 8:
						settle("nack", k, int(attempt))
					case r < 12: // stall: let the ack timeout pass
					default:
						settle("ack", k, int(attempt))
					}
				case bytes2HasOp(l, `"op":"acked"`):
					id := stringAfter(l, []byte(`"id":"`))
					mu.Lock()
					a, ok := ids[id]
					delete(ids, id)
					mu.Unlock()
					if ok {
						tr.groups.acked(a.k, a.attempt)
					}
				case isOp(l, opError):
					id := stringAfter(l, []byte(`"id":"`))
					mu.Lock()
					delete(ids, id)
					mu.Unlock()
				}
				return true
			})
		}()
		sub := fmt.Appendf(nil, `{"op":"subscribe","id":"j","pattern":%q,"group":%q,"max_in_flight":8}`, tortureGroupPat, tortureGroup)
		_ = conn.Write(ctx, websocket.MessageText, sub)
		select {
		case <-crash:
			tr.kills.Add(1)
			conn.CloseNow()
		case <-readerDone:
		case <-ctx.Done():
			conn.Close(websocket.StatusNormalClosure, "")
		}
		<-readerDone
		pause(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
	}
}

func bytes2HasOp(l []byte, op string) bool { return isOp(l, []byte(op)) }

// pullMember polls the group over HTTP until ctx ends, acking what it
// gets (with the attempt), except that until stop it lets some leases
// time out.
func (tr *torture) pullMember(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	body := fmt.Appendf(nil, `{"pattern":%q,"max":20,"wait_ms":300}`, tortureGroupPat)
	nd := tr.gw.pick(rng)
	for ctx.Err() == nil {
		resp, status, err := tr.doAt(ctx, nd, http.MethodPost, "/v1/groups/"+tortureGroup+"/poll", body)
		if err != nil || status != http.StatusOK {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		var page struct {
			Records []struct {
				Topic     string `json:"topic"`
				Partition int    `json:"partition"`
				Offset    int64  `json:"offset"`
				Attempt   int    `json:"attempt"`
			} `json:"records"`
		}
		if json.Unmarshal(resp, &page) != nil {
			tr.badFrames.Add(1)
			continue
		}
		for _, r := range page.Records {
			k := gkey(r.Topic, r.Partition, r.Offset)
			tr.groups.delivered(k, r.Attempt)
			if !stopped(ctx, stop) && rng.IntN(10) == 0 {
				continue
			}
			ack := fmt.Appendf(nil, `{"topic":%q,"partition":%d,"offset":%d,"attempt":%d}`, r.Topic, r.Partition, r.Offset, r.Attempt)
			if _, st, err := tr.doAt(ctx, nd, http.MethodPost, "/v1/groups/"+tortureGroup+"/ack", ack); err == nil && st == http.StatusOK {
				tr.groups.acked(k, r.Attempt)
			}
		}
	}
}

// blockStaller is a member of the Block topic's group that reads and never
// acks, until ctx ends: the topic stays full.
func (tr *torture) blockStaller(ctx context.Context) {
	for ctx.Err() == nil {
		conn, _, err := dialGateway(ctx, tr.gw.nodes[0].wsURL, false)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		sub := fmt.Appendf(nil, `{"op":"subscribe","pattern":%q,"group":%q}`, tr.block.name, tortureBlockGroup)
		if conn.Write(ctx, websocket.MessageText, sub) == nil {
			_ = readFrames(ctx, conn, func([]byte) bool { return true })
		}
		conn.CloseNow()
	}
}

// nonReader subscribes to everything, never reads, and is killed without
// a close frame after a while (by then the gateway's keepalive ping waits
// for its pong), until stop.
func (tr *torture) nonReader(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	nd := tr.gw.pick(rng)
	for !stopped(ctx, stop) {
		conn, _, err := dialGateway(ctx, nd.wsURL, true)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		_ = conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","pattern":"tt.#"}`))
		t := time.NewTimer(time.Duration(500+rng.IntN(4000)) * time.Millisecond)
		select {
		case <-t.C:
		case <-stop:
		case <-ctx.Done():
		}
		t.Stop()
		tr.kills.Add(1)
		conn.CloseNow()
	}
	// One more, left open until every client leaves, then killed: the
	// gateway must drop its session at once, ping outstanding or not.
	if conn, _, err := dialGateway(ctx, nd.wsURL, true); err == nil {
		_ = conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","pattern":"tt.#"}`))
		<-ctx.Done()
		conn.CloseNow()
	}
}

// midFrame opens connections that die in the middle of a frame (header or
// payload), until stop.
func (tr *torture) midFrame(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	for !stopped(ctx, stop) {
		c, _, done, err := tr.hostile.dialWS(ctx)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		frame := wsFrame(nil, 1, true, appendTorturePublish(nil, 1, tr.plain[0].name, "", "", time.Now(), 0))
		cut := 1 + rng.IntN(len(frame)-1)
		_, _ = c.Write(frame[:cut])
		pause(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
		tr.kills.Add(1)
		done()
		pause(ctx, time.Duration(100+rng.IntN(400))*time.Millisecond)
	}
}

// presenceChurn joins and leaves a presence topic, until stop.
func (tr *torture) presenceChurn(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	nd := tr.gw.pick(rng)
	for !stopped(ctx, stop) {
		conn, _, err := dialGateway(ctx, nd.wsURL, false)
		if err != nil {
			pause(ctx, 100*time.Millisecond)
			continue
		}
		readerDone := make(chan struct{})
		go func() { // exits when the connection ends
			defer close(readerDone)
			_ = readFrames(ctx, conn, func([]byte) bool { return true })
		}()
		room := "tp.room" + strconv.Itoa(rng.IntN(3))
		_ = conn.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"op":"subscribe","pattern":%q,"presence":true}`, room))
		pause(ctx, time.Duration(200+rng.IntN(1500))*time.Millisecond)
		if rng.IntN(2) == 0 {
			_ = conn.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"op":"unsubscribe","pattern":%q}`, room))
			_ = conn.Write(ctx, websocket.MessageText, fmt.Appendf(nil, `{"op":"presence","id":1,"topic":%q}`, room))
			pause(ctx, 50*time.Millisecond)
			conn.Close(websocket.StatusNormalClosure, "")
		} else {
			tr.kills.Add(1)
			conn.CloseNow()
		}
		<-readerDone
	}
}

// deleteAnswerWithin bounds how long recreate asks for a delete's answer:
// several times the longest a graceful restart has kept a gateway away
// (about 5 s on a loaded machine).
const deleteAnswerWithin = 30 * time.Second

// deleter deletes a deletable topic and creates it again every few
// seconds, until stop; no publish to it is in flight meanwhile.
func (tr *torture) deleter(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	for !stopped(ctx, stop) {
		pause(ctx, time.Duration(2000+rng.IntN(4000))*time.Millisecond)
		if stopped(ctx, stop) {
			return
		}
		t := tr.deletable[rng.IntN(len(tr.deletable))]
		t.gate.Lock()
		tr.deleteMu.Lock()
		tr.recreate(ctx, t)
		tr.deleteMu.Unlock()
		t.gate.Unlock()
	}
}

// recreate deletes t and creates it again, in the books too; the caller
// holds t.gate and deleteMu exclusively. A DELETE whose reply is lost may
// have deleted the topic, so it is sent again until the gateway answers
// (204, or 404 for a topic already gone), for longer than a restart keeps
// the gateway away: given up sooner, a delete that took effect would go
// unbooked and the topic's next records would look like the old
// generation's. Only the run deletes topics, so either way the generation
// is over.
func (tr *torture) recreate(ctx context.Context, t *tortureTopic) {
	status := 0
	for end := time.Now().Add(deleteAnswerWithin); time.Now().Before(end) && ctx.Err() == nil; {
		var err error
		if _, status, err = tr.do(ctx, http.MethodDelete, "/v1/topics/"+t.name, nil); err == nil && status < 500 {
			break
		}
		status = 0
		pause(ctx, 100*time.Millisecond)
	}
	if status == http.StatusNoContent || status == http.StatusNotFound {
		tr.l.deleted(t.name, t.gen.Load())
		t.gen.Add(1)
		tr.deletes.Add(1)
		// A gateway restart may refuse the create: retry it, bounded.
		err := tr.createTopic(ctx, t, "")
		for attempt := 0; err != nil && attempt < 50 && ctx.Err() == nil; attempt++ {
			pause(ctx, 200*time.Millisecond)
			err = tr.createTopic(ctx, t, "")
		}
		if err != nil {
			tr.setupErrors.Add(1)
		}
	} else {
		tr.setupErrors.Add(1)
	}
}

// restarter restarts a gateway gracefully every --restart-every or so
// (from half to one and a half times it), one at a time, until stop; a
// restart in progress at stop finishes first.
func (tr *torture) restarter(ctx context.Context, rng *rand.Rand, stop <-chan struct{}) {
	for !stopped(ctx, stop) {
		every := tr.cfg.restartEvery
		pause(ctx, every/2+time.Duration(rng.Int64N(int64(every))))
		if stopped(ctx, stop) {
			return
		}
		i := rng.IntN(len(tr.gw.nodes))
		away, err := tr.gw.restart(i)
		if err != nil {
			tr.v5.add("%v", err)
			continue
		}
		tr.restarts.Add(1)
		if int64(away) > tr.worstRestart.Load() {
			tr.worstRestart.Store(int64(away))
		}
	}
}

// createTopic creates t with extra fields (JSON, after a comma) when set.
func (tr *torture) createTopic(ctx context.Context, t *tortureTopic, extra string) error {
	body := fmt.Sprintf(`{"name":%q,"partitions":%d%s}`, t.name, t.parts, extra)
	_, status, err := tr.do(ctx, http.MethodPost, "/v1/topics", []byte(body))
	if err != nil {
		return err
	}
	if status != http.StatusCreated {
		return fmt.Errorf("create topic %s: status %d", t.name, status)
	}
	return nil
}
