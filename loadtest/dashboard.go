package main

// The dashboard scenario: a state feed of the kind deltas are for. One
// publisher sends the next version of a 2 KiB JSON state object (a few
// fields change per update) at --rate to --subscribers WebSocket
// subscribers, in rounds that alternate plain subscriptions and
// "delta":"fossil" ones (--rounds of each, same run, same gateway), and
// reports per kind: WebSocket payload bytes received per delivery, and the
// gateway's CPU per delivery (--server-pid; with --inprocess, the CPU of
// this process, gateway and generator together). Every delta is applied
// (github.com/centrifugal/fdelta) and its result checked against the state
// published, so a wrong delta fails the run.

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/centrifugal/fdelta"
	"github.com/coder/websocket"
)

// dashboardState is version v of the state object: 2 KiB, of which the
// version, a counter, a status and one of 30 gauges change per update.
func dashboardState(v int64) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"version":%d,"updated_ms":%d,"status":"%s","alerts":%d`, v, 1_700_000_000_000+v*250, []string{"ok", "warn", "ok", "degraded"}[v%4], v%7)
	for i := range int64(30) {
		val := 1000 + i*13
		if i == v%30 {
			val += v % 1000
		}
		fmt.Fprintf(&b, `,"gauge_%02d":{"value":%d,"unit":"ms","label":"service-%02d p99"}`, i, val, i)
	}
	b.WriteString("}")
	return []byte(b.String())
}

// DashboardKind is one kind's figures, medians over its rounds.
type DashboardKind struct {
	Delta       bool      `json:"delta"`
	Deliveries  int64     `json:"deliveries"`
	BytesPerD   float64   `json:"bytes_per_delivery"`
	CPUPerDUS   float64   `json:"cpu_us_per_delivery"`
	DeltaFrames int64     `json:"delta_frames"`
	Rounds      []float64 `json:"cpu_us_per_delivery_rounds"`
}

// dashboardRound runs one round and returns deliveries, bytes, CPU: it
// subscribes cfg.subscribers WebSocket clients to the round's topic (with
// fossil deltas when delta is set), publishes the states at cfg.rate,
// waits up to cfg.drain for every delivery and measures the gateway's CPU
// over the publishing and the drain.
func dashboardRound(ctx context.Context, cfg *config, round int, delta bool) (deliveries, bytes, deltas int64, cpu time.Duration, err error) {
	topic := fmt.Sprintf("loadtest.dash.r%d", round)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	var tally dashTally
	conns := make([]*websocket.Conn, 0, cfg.subscribers)
	defer func() {
		for _, c := range conns {
			c.CloseNow()
		}
	}()
	for range cfg.subscribers {
		c, err := dashSubscribe(ctx, cfg.url, topic, delta)
		if c != nil {
			conns = append(conns, c)
		}
		if err != nil {
			return 0, 0, 0, 0, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tally.read(ctx, c)
		}()
	}
	pub, err := dashPublisher(ctx, cfg.url)
	if pub != nil {
		defer pub.CloseNow()
	}
	if err != nil {
		return 0, 0, 0, 0, err
	}
	n := int64(cfg.rate * cfg.duration.Seconds())
	if cfg.messages > 0 {
		n = min(n, cfg.messages)
	}
	interval := time.Duration(float64(time.Second) / cfg.rate)
	cpu0, err := dashboardCPU(cfg)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if err := dashPublish(ctx, pub, topic, n, interval); err != nil {
		return 0, 0, 0, 0, err
	}
	tally.wait(n*int64(cfg.subscribers), cfg.drain)
	cpu1, err := dashboardCPU(cfg)
	if err != nil {
		return 0, 0, 0, 0, err
	}
	if tally.bad.Load() > 0 {
		return 0, 0, 0, 0, fmt.Errorf("%d deliveries did not rebuild the state: %v", tally.bad.Load(), tally.firstErr.Load())
	}
	return tally.deliveries.Load(), tally.bytes.Load(), tally.deltas.Load(), cpu1 - cpu0, nil
}

// dashSubscribe dials url and subscribes to topic, with fossil deltas when
// delta is set, returning once the subscription is confirmed. It returns
// the connection, for the caller to close, whenever the dial succeeded.
func dashSubscribe(ctx context.Context, url, topic string, delta bool) (*websocket.Conn, error) {
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	c.SetReadLimit(1 << 20)
	req := map[string]any{"op": "subscribe", "id": 1, "pattern": topic}
	if delta {
		req["delta"] = "fossil"
	}
	b, _ := json.Marshal(req)
	if err := c.Write(ctx, websocket.MessageText, b); err != nil {
		return c, err
	}
	// welcome, then subscribed
	for seen := 0; seen < 2; {
		_, data, err := c.Read(ctx)
		if err != nil {
			return c, err
		}
		seen += strings.Count(string(data), "\n") + 1
	}
	return c, nil
}

// dashPublisher dials url for the round's publisher and reads its welcome;
// its replies are then read and dropped by a goroutine that exits when the
// connection or ctx ends. It returns the connection, for the caller to
// close, whenever the dial succeeded.
func dashPublisher(ctx context.Context, url string) (*websocket.Conn, error) {
	pub, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		return nil, err
	}
	if _, _, err := pub.Read(ctx); err != nil { // welcome
		return pub, err
	}
	go func() { // replies are read and dropped
		for {
			if _, _, err := pub.Read(ctx); err != nil {
				return
			}
		}
	}()
	return pub, nil
}

// dashPublish publishes versions 0 to n-1 of the state to topic, one per
// interval.
func dashPublish(ctx context.Context, pub *websocket.Conn, topic string, n int64, interval time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for v := int64(0); v < n; v++ {
		frame := fmt.Appendf(nil, `{"op":"publish","topic":%q,"data":%s}`, topic, dashboardState(v))
		if err := pub.Write(ctx, websocket.MessageText, frame); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// dashTally is what a round's subscribers received: deliveries, bytes and
// deltas, and the deliveries that did not rebuild the state published
// (bad), with the first one's error. Its methods are safe for concurrent
// use by the subscribers' readers.
type dashTally struct {
	deliveries, bytes, deltas, bad atomic.Int64
	firstErr                       atomic.Value
}

// fail counts a delivery that did not rebuild the state.
func (t *dashTally) fail(e error) {
	t.bad.Add(1)
	t.firstErr.CompareAndSwap(nil, e)
}

// read counts and checks what c receives until it fails (c is closed or
// ctx ends), applying each delta to the state before it.
func (t *dashTally) read(ctx context.Context, c *websocket.Conn) {
	var base []byte
	for {
		_, data, err := c.Read(ctx)
		if err != nil {
			return
		}
		t.bytes.Add(int64(len(data)))
		for _, line := range strings.Split(string(data), "\n") {
			base = t.message(line, base)
		}
	}
}

// message counts and checks one frame of a batch, a message whose state
// (or whose delta applied to base) must be the state published at its
// offset. It returns the state the next delta applies to: base again when
// line is not a message or its delta could not be applied.
func (t *dashTally) message(line string, base []byte) []byte {
	var f struct {
		Op       string          `json:"op"`
		Offset   int64           `json:"offset"`
		Data     json.RawMessage `json:"data"`
		Encoding string          `json:"encoding"`
		Delta    bool            `json:"delta"`
	}
	if json.Unmarshal([]byte(line), &f) != nil || f.Op != "message" {
		return base
	}
	t.deliveries.Add(1)
	payload := []byte(f.Data)
	if f.Delta {
		t.deltas.Add(1)
		var s string
		_ = json.Unmarshal(f.Data, &s)
		d := []byte(s)
		if f.Encoding == "base64" {
			d, _ = base64.StdEncoding.DecodeString(s)
		}
		var err error
		if payload, err = fdelta.Apply(base, d); err != nil {
			t.fail(fmt.Errorf("offset %d: %w", f.Offset, err))
			return base
		}
	}
	if string(payload) != string(dashboardState(f.Offset)) {
		t.fail(fmt.Errorf("offset %d: payload differs from the state published", f.Offset))
	}
	return payload
}

// wait waits, polling, until want deliveries are counted or drain passes.
func (t *dashTally) wait(want int64, drain time.Duration) {
	deadline := time.Now().Add(drain)
	for t.deliveries.Load() < want && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // bounded by --drain
	}
}

// dashboardCPU is the gateway's CPU time (this process's with --inprocess).
func dashboardCPU(cfg *config) (time.Duration, error) {
	if cfg.serverPID > 0 {
		return procCPU(cfg.serverPID)
	}
	if cfg.inprocess {
		return selfCPU(), nil
	}
	return 0, errors.New("dashboard: give --server-pid (or use --inprocess) to measure the gateway's CPU")
}

// runDashboard alternates plain and delta rounds and prints the figures.
func runDashboard(ctx context.Context, cfg *config, out io.Writer) error {
	kinds := [2]*DashboardKind{{Delta: false}, {Delta: true}}
	var bytesPer [2][]float64
	for r := range 2 * cfg.rounds {
		k := r % 2
		d, b, nd, cpu, err := dashboardRound(ctx, cfg, r, k == 1)
		if err != nil {
			return fmt.Errorf("round %d (delta %v): %w", r, k == 1, err)
		}
		if d == 0 {
			return fmt.Errorf("round %d: no deliveries", r)
		}
		kk := kinds[k]
		kk.Deliveries += d
		kk.DeltaFrames += nd
		kk.Rounds = append(kk.Rounds, float64(cpu.Microseconds())/float64(d))
		bytesPer[k] = append(bytesPer[k], float64(b)/float64(d))
		fmt.Fprintf(out, "round %d delta=%v: %d deliveries (%d deltas), %.0f B/delivery, %.2f µs CPU/delivery\n",
			r, k == 1, d, nd, float64(b)/float64(d), float64(cpu.Microseconds())/float64(d))
	}
	for k, kk := range kinds {
		kk.CPUPerDUS = median(kk.Rounds)
		kk.BytesPerD = median(bytesPer[k])
	}
	plain, delta := kinds[0], kinds[1]
	fmt.Fprintf(out, "plain: %.0f B/delivery, %.2f µs CPU/delivery (median of %d rounds)\n", plain.BytesPerD, plain.CPUPerDUS, cfg.rounds)
	fmt.Fprintf(out, "delta: %.0f B/delivery, %.2f µs CPU/delivery (median of %d rounds)\n", delta.BytesPerD, delta.CPUPerDUS, cfg.rounds)
	fmt.Fprintf(out, "bytes %.1f× smaller with deltas; CPU per delivery %.2f× plain\n", plain.BytesPerD/delta.BytesPerD, delta.CPUPerDUS/plain.CPUPerDUS)
	if cfg.jsonOut {
		b, _ := json.MarshalIndent(kinds, "", "  ")
		fmt.Fprintln(out, string(b))
	}
	return nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// dashboardCommand runs the scenario against --url, or an embedded gateway
// with --inprocess.
func dashboardCommand(ctx context.Context, cfg *config, out io.Writer) error {
	if cfg.rate <= 0 || cfg.rounds < 1 {
		return errors.New("dashboard: --rate must be positive and --rounds at least 1")
	}
	if cfg.inprocess {
		gw, err := startInProcess(cfg)
		if err != nil {
			return err
		}
		defer func() { _ = gw.stop() }()
		cfg.url, cfg.httpURL = gw.wsURL, gw.httpURL
	}
	wsu, _, err := resolveURLs(ctx, cfg.url, cfg.httpURL, true)
	if err != nil {
		return err
	}
	cfg.url = wsu
	return runDashboard(ctx, cfg, out)
}
