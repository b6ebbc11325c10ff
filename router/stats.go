package router

import (
	"context"
	"encoding/json"
	"errors"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// System topics the gateway publishes to.
const (
	sysStats  = "$sys.stats"
	sysTopics = "$sys.topics"
	sysGroups = "$sys.groups"
)

// deadLetterBuffer bounds the queue_full dead letters waiting to be
// recorded in the engine; past it they are counted as lost
// (switchyard_dead_letters_unrecorded_total) rather than slowing fan-out.
const deadLetterBuffer = 4096

// latencySample: one delivery in this many (by offset) feeds the
// publish-to-write histogram, keeping its cost off most deliveries.
const latencySample = 16

// onSent implements session.Options.OnSent: sampled publish-to-write
// latency of plain deliveries.
func (rt *Router) onSent(ref any, at time.Time) {
	switch r := ref.(type) {
	case *engine.Record:
		if r.Offset%latencySample == 0 {
			rt.m.deliveryLatency.Observe(at.Sub(r.Time).Seconds())
		}
	case *groupRef:
		r.sent()
	case *deltaRef:
		if r.rec.Offset%latencySample == 0 {
			rt.m.deliveryLatency.Observe(at.Sub(r.rec.Time).Seconds())
		}
	}
}

// deadLetter queues a queue_full dead letter for the recorder goroutine.
func (rt *Router) deadLetter(dl engine.DeadLetter) {
	select {
	case rt.dlq <- dl:
	default:
		rt.m.deadLettersLost.Inc()
	}
}

// recordDeadLetters stores queued dead letters in the engine until
// Shutdown; what is queued then is stored before it returns.
func (rt *Router) recordDeadLetters() {
	store := func(dl engine.DeadLetter) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rt.eng.AddDeadLetter(ctx, dl); err != nil {
			rt.m.deadLettersLost.Inc()
			if !errors.Is(err, engine.ErrClosed) {
				rt.log.Warn("recording dead letter failed", "err", err)
			}
			return
		}
		rt.m.deadLetters.WithLabelValues(dl.Reason).Inc()
	}
	for {
		select {
		case dl := <-rt.dlq:
			store(dl)
		case <-rt.stopBG:
			for {
				select {
				case dl := <-rt.dlq:
					store(dl)
				default:
					return
				}
			}
		}
	}
}

// maxLagSeries caps the switchyard_group_lag series, keeping the metric's
// cardinality bounded however many groups and partitions exist (the full
// picture is in GET /v1/groups).
const maxLagSeries = 1000

// maxTrackedTopics bounds the per-topic publish counters behind top_topics.
const maxTrackedTopics = 10000

// stats are the per-topic publish counters behind the top_topics of
// $sys.stats (Prometheus has no per-topic series). The other figures of
// $sys.stats are read from the Prometheus collectors (metrics.statsFigures), so
// each event is counted once.
type stats struct {
	topics     sync.Map // topic -> *atomic.Int64
	topicCount atomic.Int64
}

func (s *stats) countTopic(topic string) {
	if v, ok := s.topics.Load(topic); ok {
		v.(*atomic.Int64).Add(1)
		return
	}
	if s.topicCount.Load() >= maxTrackedTopics {
		return
	}
	v, loaded := s.topics.LoadOrStore(topic, new(atomic.Int64))
	if !loaded {
		s.topicCount.Add(1)
	}
	v.(*atomic.Int64).Add(1)
}

func (rt *Router) startBackground() {
	rt.wg.Add(2)
	go func() {
		defer rt.wg.Done()
		rt.recordDeadLetters()
	}()
	go func() {
		defer rt.wg.Done()
		rt.background()
	}()
}

// background publishes the system topics and expires idle pull members
// until Shutdown closes stopBG.
func (rt *Router) background() {
	interval := rt.opts.StatsInterval
	if interval < 0 {
		interval = time.Second
	}
	if rt.opts.StatsInterval > 0 {
		for name, keep := range map[string]int64{sysStats: 600, sysTopics: sysSummaryRecords, sysGroups: sysSummaryRecords} {
			_, err := rt.eng.CreateTopic(rt.ctx, engine.TopicConfig{Name: name, MaxMessages: keep})
			if err != nil && !errors.Is(err, engine.ErrTopicExists) {
				rt.log.Warn("creating system topic failed", "topic", name, "err", err)
			}
		}
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	started := time.Now()
	prev := snapshot{at: started}
	prevTopics := map[string]int64{}
	sys := &sysState{at: started, topicNames: map[string]struct{}{}, groupNames: map[string]struct{}{},
		topicCounts: map[string]int64{}}
	for n := 0; ; n++ {
		select {
		case <-rt.stopBG:
			return
		case now := <-tick.C:
			rt.expirePulls(now, false)
			if rt.opts.StatsInterval < 0 {
				continue
			}
			cur := rt.snapshot(now)
			rt.publishSys(sysStats, rt.statsPayload(cur, prev, prevTopics, started))
			prev = cur
			if n%5 == 0 {
				rt.publishTopicsAndGroups(sys, now)
			}
		}
	}
}

type snapshot struct {
	at time.Time
	statsFigures
	bytesIn, bytesOut int64
}

func (rt *Router) snapshot(now time.Time) snapshot {
	in, out := rt.sessionBytes()
	return snapshot{at: now, statsFigures: rt.m.statsFigures(), bytesIn: int64(in), bytesOut: int64(out)}
}

type topicRate struct {
	Topic string  `json:"topic"`
	Rate  float64 `json:"publishes_per_s"`
}

type slowConsumer struct {
	Session string `json:"session"`
	Queued  int    `json:"queued"`
	Dropped int64  `json:"dropped"`
}

func (rt *Router) statsPayload(cur, prev snapshot, prevTopics map[string]int64, started time.Time) map[string]any {
	secs := cur.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		secs = 1
	}
	rate := func(a, b int64) float64 { return float64(max(0, a-b)) / secs }
	var top []topicRate
	rt.stats.topics.Range(func(k, v any) bool {
		n := v.(*atomic.Int64).Load()
		name := k.(string)
		if d := n - prevTopics[name]; d > 0 {
			top = append(top, topicRate{Topic: name, Rate: float64(d) / secs})
		}
		prevTopics[name] = n
		return true
	})
	sort.Slice(top, func(i, j int) bool { return top[i].Rate > top[j].Rate })
	if len(top) > 10 {
		top = top[:10]
	}
	conns := rt.connList()
	var slow []slowConsumer
	for _, c := range conns {
		st := c.sess.Stats()
		rt.m.queueDepth.Observe(float64(st.Queued))
		if st.Queued > 0 || st.Dropped > 0 {
			slow = append(slow, slowConsumer{Session: c.id, Queued: st.Queued, Dropped: int64(st.Dropped)})
		}
	}
	sort.Slice(slow, func(i, j int) bool {
		if slow[i].Queued != slow[j].Queued {
			return slow[i].Queued > slow[j].Queued
		}
		return slow[i].Dropped > slow[j].Dropped
	})
	if len(slow) > 10 {
		slow = slow[:10]
	}
	if top == nil {
		top = []topicRate{}
	}
	if slow == nil {
		slow = []slowConsumer{}
	}
	return map[string]any{
		"time":        cur.at.UTC().Format(timeFormat),
		"uptime_s":    int64(cur.at.Sub(started).Seconds()),
		"connections": len(conns),
		"subscriptions": map[string]int64{
			"plain": cur.plainSubs,
			"group": cur.groupSubs,
		},
		"rates": map[string]float64{
			"publishes":  rate(cur.publishes, prev.publishes),
			"deliveries": rate(cur.deliveries, prev.deliveries),
			"drops":      rate(cur.drops, prev.drops),
			"bytes_in":   rate(cur.bytesIn, prev.bytesIn),
			"bytes_out":  rate(cur.bytesOut, prev.bytesOut),
		},
		"totals": map[string]int64{
			"publishes":    cur.publishes,
			"deliveries":   cur.deliveries,
			"drops":        cur.drops,
			"gaps":         cur.gaps,
			"dead_letters": cur.deadLetters,
		},
		"top_topics":     top,
		"slow_consumers": slow,
	}
}

// publishTopicsAndGroups publishes the $sys.topics and $sys.groups
// summaries (see sys_summary.go) and refreshes the group lag gauges.
func (rt *Router) publishTopicsAndGroups(st *sysState, now time.Time) {
	ctx, cancel := context.WithTimeout(rt.ctx, 2*time.Second)
	defer cancel()
	if ts, err := rt.eng.Topics(ctx); err == nil {
		sum := rt.topicsSummaryOf(st, ts, now)
		rt.publishSysRecord(sysTopics, &sum, sum.shrink)
	}
	st.at = now
	if gs, err := rt.eng.Groups(ctx); err == nil {
		rt.m.groupLag.Reset()
		series := 0
		for _, g := range gs {
			for _, p := range g.Partitions {
				if series >= maxLagSeries {
					break
				}
				series++
				rt.m.groupLag.WithLabelValues(g.Name, p.Topic, itoa(int64(p.Partition))).Set(float64(p.Lag))
			}
		}
		sum := groupsSummaryOf(st, gs, now)
		rt.publishSysRecord(sysGroups, &sum, sum.shrink)
	}
	rt.refreshDeadLetters(ctx)
}

// publishSysRecord publishes a summary shrunk to maxSysRecordBytes.
func (rt *Router) publishSysRecord(topic string, v any, shrink func() bool) {
	data, err := sysRecordFit(v, shrink)
	if err != nil {
		rt.log.Error("encoding system payload failed", "topic", topic, "err", err)
		return
	}
	rt.publishSys(topic, json.RawMessage(data))
}

func (rt *Router) publishSys(topic string, payload any) {
	data, err := json.Marshal(payload)
	if err != nil {
		rt.log.Error("encoding system payload failed", "topic", topic, "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(rt.ctx, 2*time.Second)
	defer cancel()
	if _, err := rt.eng.Append(ctx, engine.Message{Topic: topic, Data: data, Priority: 0}); err != nil &&
		!errors.Is(err, engine.ErrClosed) && !errors.Is(err, context.Canceled) {
		rt.log.Warn("publishing system topic failed", "topic", topic, "err", err)
	}
}
