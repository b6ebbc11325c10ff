package main

// The soak scenario's sampling of the gateway: goroutines, heap and RSS.

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// sample looks at the gateway once and records what it saw.
func (st *soak) sample(ctx context.Context, phase string) Sample {
	return st.record(st.measure(ctx, phase))
}

// measure looks at the gateway once. In-process it collects garbage
// first, so the heap figure is the live heap.
func (st *soak) measure(ctx context.Context, phase string) Sample {
	r := st.r
	s := Sample{T: time.Since(st.start).Seconds(), Phase: phase, Sent: r.c.sent.Load(), Delivered: r.c.delivered.Load()}
	if r.cfg.inprocess {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s.Goroutines, s.HeapBytes = int64(st.goroutines()), int64(ms.HeapAlloc)
		s.RSSBytes, _ = procRSS(os.Getpid())
	} else {
		g, h, err := st.scrape(ctx)
		if err != nil {
			st.sampleErr.CompareAndSwap(nil, err.Error())
		}
		s.Goroutines, s.HeapBytes = g, h
		if r.cfg.serverPID > 0 {
			s.RSSBytes, _ = procRSS(r.cfg.serverPID)
		}
	}
	return s
}

// record keeps s among the run's samples and returns it.
func (st *soak) record(s Sample) Sample {
	st.sampleMu.Lock()
	st.samples = append(st.samples, s)
	st.sampleMu.Unlock()
	return s
}

// sampler samples every --sample-interval until stop is closed; it returns
// when it has stopped.
func (st *soak) sampler(ctx context.Context, phase *atomic.Value, stop <-chan struct{}) {
	t := time.NewTicker(st.r.cfg.sampleInterval)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			st.sample(ctx, phase.Load().(string))
		}
	}
}

// scrape reads go_goroutines and go_memstats_heap_inuse_bytes from the
// gateway's /metrics.
func (st *soak) scrape(ctx context.Context) (goroutines, heap int64, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.r.cfg.httpURL+"/metrics", nil)
	if err != nil {
		return 0, 0, err
	}
	resp, err := st.metricsClient.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("scraping /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("scraping /metrics: HTTP %d", resp.StatusCode)
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || (name != metricGoroutines && name != metricHeapInuse) {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/metrics %s: %w", name, err)
		}
		if name == metricGoroutines {
			goroutines = int64(f)
		} else {
			heap = int64(f)
		}
		found++
	}
	if err := sc.Err(); err != nil {
		return 0, 0, fmt.Errorf("scraping /metrics: %w", err)
	}
	if found < 2 {
		return goroutines, heap, fmt.Errorf("/metrics lacks %s or %s", metricGoroutines, metricHeapInuse)
	}
	return goroutines, heap, nil
}

// procRSS reads VmRSS from /proc/<pid>/status, in bytes.
func procRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS: %w", err)
			}
			return kb * 1024, nil
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no VmRSS", pid)
}
