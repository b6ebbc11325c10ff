package main

// The NATS-node-loss test: three gateway nodes on a three-server NATS
// cluster with three replicas, under load, lose the NATS server that leads
// the log and the groups' bucket, and get it back.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// Bounds of the node-loss test.
const (
	// lossPublishBound: no publish may take longer to be answered
	// (published or unavailable), even during the leader election.
	lossPublishBound = 10 * time.Second
	// lossSlow: a publish answered later than this counts as disturbed
	// for the unavailability window.
	lossSlow = 500 * time.Millisecond
)

// lossOutcome is one publish's answer.
type lossOutcome struct {
	pub        int // publisher index
	topic      string
	data       string
	start, end time.Time
	code       string // "" when published, else the error code
	partition  int
	offset     int64
}

// lossLog collects what every goroutine of the test saw; safe for
// concurrent use.
type lossLog struct {
	mu         sync.Mutex
	outcomes   []lossOutcome
	violations []string
	// Plain subscribers: offsets of loss.feed delivered, and gaps.
	feed []map[int64]string
	gaps [][][2]int64
	// The group: records acked (by "partition/offset"), deliveries.
	acked      map[string]string
	deliveries int
	ackErrors  map[string]int
}

func (l *lossLog) violate(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.violations) < 50 {
		l.violations = append(l.violations, fmt.Sprintf(format, args...))
	}
}

// writeFrame sends v on w without failing the test (for goroutines).
func writeFrame(w *wsConn, v map[string]any) error {
	data, _ := json.Marshal(v)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return w.c.Write(ctx, websocket.MessageText, data)
}

// TestNATSNodeLoss runs three gateway nodes, each given the client URLs of
// a three-server NATS cluster, with --nats-replicas 3; publishers, plain
// subscribers and a consumer group spread over them. Mid-load the NATS
// server that leads the log stream and the groups' bucket (and that a
// gateway is connected to) is killed, and later started again on its
// store. It checks:
//   - every publish is answered within lossPublishBound, published or
//     unavailable (no other error);
//   - every published record of the plain topic reaches every plain
//     subscriber (all stay connected) once and in order, or is inside a gap;
//   - no group record is delivered again after its ack was acknowledged,
//     and every published job is acked in the end;
//   - every published record is in the log afterwards, with its data.
//
// It logs the outcome counts and the unavailability window (from the first
// publish that failed or took longer than lossSlow to the end of the last
// one), the figures docs/BENCHMARKS.md reports.
func TestNATSNodeLoss(t *testing.T) {
	if testing.Short() {
		t.Skip("node loss: a 30 s scenario")
	}
	c := natstest.NewCluster(t, 3)
	const prefix = "nodeloss"
	nodes := make([]*node, 3)
	for i := range nodes {
		nodes[i] = startNode(t, "--engine", "nats", "--nats-url", c.URLs(i), "--nats-replicas", "3",
			"--nats-prefix", prefix, "--ack-timeout", "3s", "--backoff-min", "100ms", "--backoff-max", "500ms")
	}
	if code, m, _ := httpJSON(t, "POST", "http://"+nodes[0].addr+"/v1/topics", `{"name":"loss.jobs","partitions":3}`); code >= 300 {
		t.Fatalf("create loss.jobs: %d %v", code, m)
	}

	// The victim: a server a gateway is connected to, made the leader of
	// the log and of the groups' bucket, so its loss moves both leaders
	// and fails a gateway's connection over.
	victim, most := 0, -1
	for i := range c.Len() {
		if n := c.Server(i).NumClients(); n > most {
			victim, most = i, n
		}
	}
	for _, s := range []string{prefix + "_rec", "KV_" + prefix + "_groups"} {
		c.MoveStreamLeader(s, victim)
	}
	t.Logf("victim: NATS server %d (%d gateway connections)", victim, most)

	l := &lossLog{acked: map[string]string{}, ackErrors: map[string]int{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()

	// Plain subscribers, one per gateway.
	subs := make([]*wsConn, len(nodes))
	for i, n := range nodes {
		subs[i] = dialNode(t, n)
		subs[i].send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "loss.feed"})
		subs[i].expect(t, "subscribed")
		l.feed = append(l.feed, map[int64]string{})
		l.gaps = append(l.gaps, nil)
		wg.Add(1)
		go func() { // exits on stop or when the connection closes
			defer wg.Done()
			next := int64(-1)
			for {
				select {
				case <-stop:
					return
				case <-subs[i].done:
					l.violate("subscriber %d: connection closed", i)
					return
				case m := <-subs[i].frames:
					switch m["op"] {
					case "message":
						off := int64(m["offset"].(float64))
						data, _ := m["data"].(string)
						l.mu.Lock()
						if _, dup := l.feed[i][off]; dup {
							l.mu.Unlock()
							l.violate("subscriber %d: offset %d delivered twice", i, off)
							continue
						}
						l.feed[i][off] = data
						l.mu.Unlock()
						if off < next {
							l.violate("subscriber %d: offset %d after %d", i, off, next)
						}
						next = off
					case "gap":
						l.mu.Lock()
						l.gaps[i] = append(l.gaps[i], [2]int64{int64(m["from"].(float64)), int64(m["to"].(float64))})
						l.mu.Unlock()
					default:
						l.violate("subscriber %d: frame %v", i, m)
					}
				}
			}
		}()
	}

	// Group members, one per gateway: each acks every delivery.
	for i, n := range nodes {
		w := dialNode(t, n)
		w.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "loss.jobs", "group": "lossg"})
		w.expect(t, "subscribed")
		wg.Add(1)
		go func() { // exits on stop or when the connection closes
			defer wg.Done()
			pending := map[string]string{} // ack id -> record key
			seq := 0
			for {
				select {
				case <-stop:
					return
				case <-w.done:
					l.violate("member %d: connection closed", i)
					return
				case m := <-w.frames:
					switch m["op"] {
					case "message":
						key := fmt.Sprintf("%v/%v", m["partition"], m["offset"])
						l.mu.Lock()
						l.deliveries++
						_, done := l.acked[key]
						l.mu.Unlock()
						if done {
							l.violate("member %d: %s delivered again (attempt %v) after its ack was acknowledged", i, key, m["attempt"])
						}
						seq++
						id := fmt.Sprintf("a%d", seq)
						pending[id] = key
						data, _ := m["data"].(string)
						pending[id+"/data"] = data
						if err := writeFrame(w, map[string]any{"op": "ack", "id": id, "group": "lossg", "topic": m["topic"],
							"partition": m["partition"], "offset": m["offset"]}); err != nil {
							l.violate("member %d: ack: %v", i, err)
						}
					case "acked":
						id, _ := m["id"].(string)
						l.mu.Lock()
						l.acked[pending[id]] = pending[id+"/data"]
						l.mu.Unlock()
						delete(pending, id)
						delete(pending, id+"/data")
					case "error":
						id, _ := m["id"].(string)
						if _, ok := pending[id]; !ok {
							l.violate("member %d: error %v", i, m)
							continue
						}
						// A failed ack leaves the record leased: it comes
						// back after the ack timeout (at least once).
						l.mu.Lock()
						l.ackErrors[fmt.Sprint(m["code"])]++
						l.mu.Unlock()
						delete(pending, id)
						delete(pending, id+"/data")
					default:
						l.violate("member %d: frame %v", i, m)
					}
				}
			}
		}()
	}

	// Publishers, one per gateway, each one publish at a time (the next
	// 20 ms after the previous answer), alternating the two topics.
	var pubWG sync.WaitGroup
	pubStop := make(chan struct{})
	for i, n := range nodes {
		w := dialNode(t, n)
		pubWG.Add(1)
		go func() { // exits on pubStop, a hung publish or a closed connection
			defer pubWG.Done()
			for seq := 0; ; seq++ {
				select {
				case <-pubStop:
					return
				case <-time.After(20 * time.Millisecond): // the publishing pace
				}
				topic := []string{"loss.feed", "loss.jobs"}[seq%2]
				o := lossOutcome{pub: i, topic: topic, data: fmt.Sprintf("p%d-%d", i, seq), start: time.Now()}
				if err := writeFrame(w, map[string]any{"op": "publish", "id": seq, "topic": topic, "data": o.data}); err != nil {
					l.violate("publisher %d: %v", i, err)
					return
				}
				select {
				case m := <-w.frames:
					o.end = time.Now()
					if m["id"] != float64(seq) {
						l.violate("publisher %d: reply %v to publish %d", i, m, seq)
						return
					}
					switch m["op"] {
					case "published":
						o.partition, o.offset = int(m["partition"].(float64)), int64(m["offset"].(float64))
					case "error":
						o.code, _ = m["code"].(string)
						if o.code != "unavailable" {
							l.violate("publisher %d: publish %d: %v", i, seq, m)
						}
					default:
						l.violate("publisher %d: reply %v", i, m)
					}
				case <-w.done:
					l.violate("publisher %d: connection closed", i)
					return
				case <-time.After(lossPublishBound):
					l.violate("publisher %d: publish %d not answered within %v", i, seq, lossPublishBound)
					return
				}
				if o.end.Sub(o.start) > lossPublishBound {
					l.violate("publisher %d: publish %d answered after %v", i, seq, o.end.Sub(o.start))
				}
				l.mu.Lock()
				l.outcomes = append(l.outcomes, o)
				l.mu.Unlock()
			}
		}()
	}
	published := func() int {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.outcomes)
	}

	pollUntil(t, 20*time.Second, "load before the loss", func() bool { return published() >= 60 })
	killed := time.Now()
	c.Stop(victim)
	t.Logf("NATS server %d killed after %d publishes", victim, published())
	pollUntil(t, 20*time.Second, "load during the loss", func() bool { return time.Since(killed) > 6*time.Second })
	atLoss := published()
	c.Start(victim)
	restarted := time.Now()
	t.Logf("NATS server %d restarted %v after the kill (%d publishes meanwhile)", victim, restarted.Sub(killed).Round(time.Millisecond), atLoss)
	pollUntil(t, 20*time.Second, "load after the restart", func() bool { return time.Since(restarted) > 2*time.Second })
	close(pubStop)
	pubWG.Wait()

	l.mu.Lock()
	outcomes := slices.Clone(l.outcomes)
	l.mu.Unlock()
	var feedOK, jobsOK []lossOutcome
	counts := map[string]int{}
	var disturbed []lossOutcome
	var worst time.Duration
	for _, o := range outcomes {
		counts[orElse(o.code, "published")]++
		worst = max(worst, o.end.Sub(o.start))
		if o.code != "" || o.end.Sub(o.start) > lossSlow {
			disturbed = append(disturbed, o)
		}
		switch {
		case o.code != "":
		case o.topic == "loss.feed":
			feedOK = append(feedOK, o)
		default:
			jobsOK = append(jobsOK, o)
		}
	}
	// The unavailability windows: publishes that failed or were slow,
	// started before the restart (the kill's leader elections) or after
	// it (the rejoin), each from the first one's start to the last one's
	// answer.
	for _, phase := range []struct {
		name     string
		from, to time.Time
	}{{"kill", killed.Add(-lossPublishBound), restarted}, {"restart", restarted, time.Now()}} {
		var first, last time.Time
		n := 0
		for _, o := range disturbed {
			if o.start.Before(phase.from) || !o.start.Before(phase.to) {
				continue
			}
			if n == 0 || o.start.Before(first) {
				first = o.start
			}
			if o.end.After(last) {
				last = o.end
			}
			n++
			t.Logf("%s: publisher %d (gateway %d) at %+v: %s after %v", phase.name, o.pub, o.pub,
				o.start.Sub(killed).Round(time.Millisecond), orElse(o.code, "published"), o.end.Sub(o.start).Round(time.Millisecond))
		}
		if n == 0 {
			t.Logf("%s: no publish failed or took over %v", phase.name, lossSlow)
			continue
		}
		t.Logf("%s: unavailability window %v, from %v after it (%d publishes failed or slow)", phase.name,
			last.Sub(first).Round(time.Millisecond), first.Sub(map[bool]time.Time{true: killed, false: restarted}[phase.name == "kill"]).Round(time.Millisecond), n)
	}
	t.Logf("publishes: %v; slowest answer %v", counts, worst.Round(time.Millisecond))
	if counts["published"] == 0 || len(feedOK) == 0 || len(jobsOK) == 0 {
		t.Fatalf("nothing published: %v", counts)
	}

	// Every published feed record reaches every plain subscriber, or
	// falls in a gap it was told of.
	missing := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var out []string
		for i := range subs {
		next:
			for _, o := range feedOK {
				if got, ok := l.feed[i][o.offset]; ok {
					if got != o.data {
						out = append(out, fmt.Sprintf("subscriber %d: offset %d is %q, published %q", i, o.offset, got, o.data))
					}
					continue
				}
				for _, g := range l.gaps[i] {
					if o.offset >= g[0] && o.offset < g[1] {
						continue next
					}
				}
				out = append(out, fmt.Sprintf("subscriber %d: offset %d (%s) missing", i, o.offset, o.data))
			}
		}
		return out
	}
	unacked := func() []string {
		l.mu.Lock()
		defer l.mu.Unlock()
		var out []string
		for _, o := range jobsOK {
			key := fmt.Sprintf("%d/%d", o.partition, o.offset)
			if got, ok := l.acked[key]; !ok {
				out = append(out, key+" ("+o.data+") not acked")
			} else if got != o.data {
				out = append(out, fmt.Sprintf("%s acked as %q, published %q", key, got, o.data))
			}
		}
		return out
	}
	drain := time.Now()
	deadline := drain.Add(30 * time.Second)
	for len(missing())+len(unacked()) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond) // polls the collectors
	}
	t.Logf("subscribers and group caught up %v after the load ended", time.Since(drain).Round(time.Millisecond))
	for _, s := range missing() {
		t.Error(s)
	}
	for _, s := range unacked() {
		t.Error(s)
	}

	// Nothing published is missing from the log: read every partition
	// over HTTP from a node that lost its NATS server... or not.
	logged := map[string]string{}
	base := "http://" + nodes[(victim+1)%len(nodes)].addr
	for _, tp := range []struct {
		topic      string
		partitions int
	}{{"loss.feed", 1}, {"loss.jobs", 3}} {
		for p := range tp.partitions {
			for from, pages := 0, 0; pages < 100; pages++ {
				code, m, _ := httpJSON(t, "GET", fmt.Sprintf("%s/v1/topics/%s/messages?partition=%d&from=%d&limit=1000", base, tp.topic, p, from), "")
				if code != http.StatusOK {
					t.Fatalf("read %s/%d: %d %v", tp.topic, p, code, m)
				}
				msgs, _ := m["messages"].([]any)
				for _, x := range msgs {
					r := x.(map[string]any)
					data, _ := r["data"].(string)
					logged[fmt.Sprintf("%s/%d/%v", tp.topic, p, r["offset"])] = data
				}
				next := int(m["next"].(float64))
				if len(msgs) == 0 || next == from {
					break
				}
				from = next
			}
		}
	}
	for _, o := range append(feedOK, jobsOK...) {
		if got := logged[fmt.Sprintf("%s/%d/%d", o.topic, o.partition, o.offset)]; got != o.data {
			t.Errorf("log: %s/%d/%d is %q, published %q", o.topic, o.partition, o.offset, got, o.data)
		}
	}

	// A replay from the start gets the same records.
	replay := dialNode(t, nodes[(victim+1)%len(nodes)])
	replay.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "loss.*", "from": "earliest"})
	replay.expect(t, "subscribed")
	replayed := 0
	replayStart := time.Now()
	for end := time.Now().Add(20 * time.Second); replayed < len(logged) && time.Now().Before(end); {
		select {
		case m := <-replay.frames:
			if m["op"] != "message" {
				t.Errorf("replay: %v", m)
				continue
			}
			data, _ := m["data"].(string)
			if key := fmt.Sprintf("%v/%v/%v", m["topic"], m["partition"], m["offset"]); logged[key] != data {
				t.Errorf("replay: %s is %q, the log has %q", key, data, logged[key])
			}
			replayed++
		case <-time.After(time.Second):
		}
	}
	t.Logf("replay: %d of %d records in %v", replayed, len(logged), time.Since(replayStart).Round(time.Millisecond))
	if replayed < len(logged) {
		t.Errorf("replay: %d of %d records", replayed, len(logged))
	}

	close(stop)
	wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, v := range l.violations {
		t.Error(v)
	}
	gaps := 0
	for _, g := range l.gaps {
		gaps += len(g)
	}
	codes := make([]string, 0, len(l.ackErrors))
	for k, v := range l.ackErrors {
		codes = append(codes, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(codes)
	t.Logf("plain: %d records to each of %d subscribers, %d gaps; group: %d published, %d deliveries, failed acks [%s]",
		len(feedOK), len(subs), gaps, len(jobsOK), l.deliveries, strings.Join(codes, " "))
}

// orElse returns a, or b when a is empty.
func orElse(a, b string) string {
	if a == "" {
		return b
	}
	return a
}
