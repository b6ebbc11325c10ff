package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// histogram is a set of HDR histograms of microseconds, sharded so that
// many connections can record without contending on one lock. It is safe
// for concurrent use by multiple goroutines.
type histogram struct {
	shards []histShard
}

type histShard struct {
	mu sync.Mutex // guards h
	h  *hdrhistogram.Histogram
	_  [40]byte // keep shards on separate cache lines
}

// Latencies from 1µs to 10 minutes, three significant digits.
const (
	histMin = 1
	histMax = int64(10 * time.Minute / time.Microsecond)
)

func newHistogram() *histogram {
	n := 2 * runtime.GOMAXPROCS(0)
	h := &histogram{shards: make([]histShard, n)}
	for i := range h.shards {
		h.shards[i].h = hdrhistogram.New(histMin, histMax, 3)
	}
	return h
}

// record adds d from connection number shard.
func (h *histogram) record(shard int, d time.Duration) {
	us := max(histMin, min(histMax, d.Microseconds()))
	s := &h.shards[shard%len(h.shards)]
	s.mu.Lock()
	_ = s.h.RecordValue(us) // in range by construction
	s.mu.Unlock()
}

// percentiles merges the shards.
func (h *histogram) percentiles() Percentiles {
	all := hdrhistogram.New(histMin, histMax, 3)
	for i := range h.shards {
		s := &h.shards[i]
		s.mu.Lock()
		all.Merge(s.h)
		s.mu.Unlock()
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	if all.TotalCount() == 0 {
		return Percentiles{}
	}
	return Percentiles{
		Count: all.TotalCount(),
		P50:   ms(all.ValueAtQuantile(50)),
		P90:   ms(all.ValueAtQuantile(90)),
		P99:   ms(all.ValueAtQuantile(99)),
		P999:  ms(all.ValueAtQuantile(99.9)),
		Max:   ms(all.Max()),
	}
}

// Percentiles of a latency histogram, in milliseconds.
type Percentiles struct {
	Count int64   `json:"count"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p99_9_ms"`
	Max   float64 `json:"max_ms"`
}

// counters are the live totals of a run, updated by every connection.
type counters struct {
	sent          atomic.Int64 // publishes confirmed by the gateway
	publishErrors atomic.Int64
	delivered     atomic.Int64 // message frames received, duplicates included
	duplicates    atomic.Int64
	gapEvents     atomic.Int64
	gapRecords    atomic.Int64
	redeliveries  atomic.Int64 // group deliveries with attempt > 1
	acks          atomic.Int64
	nacks         atomic.Int64
	conns         atomic.Int64 // open connections
	connFailures  atomic.Int64
	disconnects   atomic.Int64 // connections the gateway dropped during the run
}

// Report is the result of a run; --json prints it as is.
type Report struct {
	Scenario       string            `json:"scenario"`
	Target         string            `json:"target"` // switchyard or nats
	URL            string            `json:"url"`
	InProcess      bool              `json:"inprocess"`
	Params         map[string]string `json:"params"`
	Seconds        float64           `json:"seconds"`
	Connections    int64             `json:"connections"`
	ConnectErrors  int64             `json:"connect_errors"`
	Sent           int64             `json:"sent"`
	PublishErrors  int64             `json:"publish_errors"`
	Expected       int64             `json:"expected"`
	Delivered      int64             `json:"delivered"`
	Lost           int64             `json:"lost"`
	Duplicates     int64             `json:"duplicates"`
	Gaps           int64             `json:"gaps"`
	GapRecords     int64             `json:"gap_records"`
	Redeliveries   int64             `json:"redeliveries,omitempty"`
	Acks           int64             `json:"acks,omitempty"`
	Nacks          int64             `json:"nacks,omitempty"`
	Disconnects    int64             `json:"disconnects"`
	PublishesPerS  float64           `json:"publishes_per_s"`
	DeliveriesPerS float64           `json:"deliveries_per_s"`
	AckedPerS      float64           `json:"acked_per_s,omitempty"` // groups
	Latency        Percentiles       `json:"latency"`
	Connect        Percentiles       `json:"connect"`
	ConnectPhase   float64           `json:"connect_phase_s"` // dialing and subscribing every subscriber
	ClientCPU      float64           `json:"client_cpu_s"`
	ServerCPU      *float64          `json:"server_cpu_s,omitempty"`
	ServerCPUPerD  *float64          `json:"server_cpu_us_per_delivery,omitempty"`
	ServerPeakRSS  *int64            `json:"server_peak_rss_bytes,omitempty"`
	Classes        []ClassReport     `json:"classes,omitempty"`
	Soak           *SoakReport       `json:"soak,omitempty"`
	PublishOver    []PhaseReport     `json:"publish_over,omitempty"` // one per --publish-over phase
	Notes          []string          `json:"notes,omitempty"`
}

// ClassReport splits a run's deliveries by kind of subscriber (fast and
// slow readers).
type ClassReport struct {
	Name        string `json:"name"`
	Subscribers int    `json:"subscribers"`
	Expected    int64  `json:"expected"`
	Delivered   int64  `json:"delivered"`
	Lost        int64  `json:"lost"`
	GapRecords  int64  `json:"gap_records"`
	// Unaccounted is what was lost without a gap: records still in socket
	// buffers or the gateway's queue when the run ended, or dropped with
	// the connection of a disconnected subscriber.
	Unaccounted int64 `json:"unaccounted"`
	Disconnects int64 `json:"disconnects"`
}

// selfCPU returns the generator's user+system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// clockTicks is USER_HZ, which Linux fixes at 100 for /proc on every
// architecture Go supports.
const clockTicks = 100

// procCPU reads a process's user+system CPU time from /proc/<pid>/stat.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields resume after ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too few fields", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad cpu fields", pid)
	}
	return time.Duration(ut+st) * time.Second / clockTicks, nil
}

// procPeakRSS reads VmHWM from /proc/<pid>/status, in bytes.
func procPeakRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmHWM: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmHWM", pid)
}

// progress prints a status line to w every second until stop is closed.
// It returns when it has stopped.
func progress(w io.Writer, c *counters, start time.Time, stop <-chan struct{}) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	var lastSent, lastDel int64
	last := start
	for {
		select {
		case <-stop:
			return
		case now := <-t.C:
			sent, del := c.sent.Load(), c.delivered.Load()
			dt := now.Sub(last).Seconds()
			fmt.Fprintf(w, "%5.1fs conns=%d sent=%d (%.0f/s) delivered=%d (%.0f/s) gaps=%d dups=%d errors=%d\n",
				now.Sub(start).Seconds(), c.conns.Load(), sent, float64(sent-lastSent)/dt,
				del, float64(del-lastDel)/dt, c.gapEvents.Load(), c.duplicates.Load(), c.publishErrors.Load())
			lastSent, lastDel, last = sent, del, now
		}
	}
}

func writeJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeTable prints r for people.
func writeTable(w io.Writer, r *Report) {
	p := func(k string, v any) { fmt.Fprintf(w, "  %-28s %v\n", k, v) }
	fmt.Fprintf(w, "Switchyard load test: %s against %s", r.Scenario, r.URL)
	if r.Target == targetNATS {
		fmt.Fprint(w, " (NATS)")
	}
	if r.InProcess {
		fmt.Fprint(w, " (in-process gateway)")
	}
	fmt.Fprintln(w)
	var keys []string
	for k := range r.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var ps []string
	for _, k := range keys {
		ps = append(ps, k+"="+r.Params[k])
	}
	p("params", strings.Join(ps, " "))
	p("duration", fmt.Sprintf("%.2fs", r.Seconds))
	p("connections", fmt.Sprintf("%d (%d failed)", r.Connections, r.ConnectErrors))
	if r.Scenario != "connect" {
		p("sent", fmt.Sprintf("%d (%.0f/s, %d errors)", r.Sent, r.PublishesPerS, r.PublishErrors))
		p("expected deliveries", r.Expected)
		p("delivered", fmt.Sprintf("%d (%.0f/s)", r.Delivered, r.DeliveriesPerS))
		p("lost", r.Lost)
		p("duplicates", r.Duplicates)
		p("gaps", fmt.Sprintf("%d (%d records)", r.Gaps, r.GapRecords))
		if r.AckedPerS > 0 {
			p("acked records/s", fmt.Sprintf("%.0f", r.AckedPerS))
		}
		if r.Acks+r.Nacks+r.Redeliveries > 0 {
			p("acks / nacks / redeliveries", fmt.Sprintf("%d / %d / %d", r.Acks, r.Nacks, r.Redeliveries))
		}
		p("disconnects", r.Disconnects)
	}
	pct := func(x Percentiles) string {
		if x.Count == 0 {
			return "-"
		}
		return fmt.Sprintf("p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f ms (n=%d)",
			x.P50, x.P90, x.P99, x.P999, x.Max, x.Count)
	}
	if r.Scenario != "connect" {
		p("end-to-end latency", pct(r.Latency))
	}
	p("connect time", pct(r.Connect))
	p("connect phase", fmt.Sprintf("%.2fs for every dial and subscribe", r.ConnectPhase))
	p("generator cpu", fmt.Sprintf("%.2fs", r.ClientCPU))
	if r.ServerCPU != nil {
		p("server cpu", fmt.Sprintf("%.2fs", *r.ServerCPU))
	}
	if r.ServerCPUPerD != nil {
		p("server cpu per delivery", fmt.Sprintf("%.2fµs", *r.ServerCPUPerD))
	}
	if r.ServerPeakRSS != nil {
		p("server peak rss", fmt.Sprintf("%.1f MiB", float64(*r.ServerPeakRSS)/(1<<20)))
	}
	for _, c := range r.Classes {
		p("class "+c.Name, fmt.Sprintf("subscribers=%d expected=%d delivered=%d lost=%d gap_records=%d unaccounted=%d disconnects=%d",
			c.Subscribers, c.Expected, c.Delivered, c.Lost, c.GapRecords, c.Unaccounted, c.Disconnects))
	}
	if r.Soak != nil {
		r.Soak.writeTable(p)
	}
	for _, ph := range r.PublishOver {
		v := fmt.Sprintf("served %d of %d offered (%.0f/s, %d errors, %d requests), delivered %d", ph.Served, ph.Offered,
			ph.PublishesPerS, ph.Errors, ph.Requests, ph.Delivered)
		if ph.ServerCPUPerD != nil {
			v += fmt.Sprintf(", server cpu %.2fs, %.2fµs per delivery", *ph.ServerCPU, *ph.ServerCPUPerD)
		}
		if l := ph.RequestLatency; l != nil && l.Count > 0 {
			v += fmt.Sprintf(", request p50 %.2f ms p99 %.2f ms", l.P50, l.P99)
		}
		p("publish over "+ph.Over, v)
	}
	for _, n := range r.Notes {
		p("note", n)
	}
}
