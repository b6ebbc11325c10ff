package main

// The soak scenario's checks: what the clients saw against what the log
// and the group hold, turned into violations.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// offsetSet is a set of (partition, offset). It is safe for concurrent use
// by multiple goroutines.
type offsetSet struct {
	mu   sync.Mutex // guards following
	bits [][]uint64
	n    int64
}

// add inserts (p, off) and reports whether it was new.
func (s *offsetSet) add(p int, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.bits) <= p {
		s.bits = append(s.bits, nil)
	}
	w := int(off / 64)
	for len(s.bits[p]) <= w {
		s.bits[p] = append(s.bits[p], 0)
	}
	m := uint64(1) << (off % 64)
	if s.bits[p][w]&m != 0 {
		return false
	}
	s.bits[p][w] |= m
	s.n++
	return true
}

func (s *offsetSet) has(p int, off int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if off < 0 || p >= len(s.bits) || int(off/64) >= len(s.bits[p]) {
		return false
	}
	return s.bits[p][off/64]&(1<<(off%64)) != 0
}

func (s *offsetSet) len() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// missing counts the offsets below ends[p] of each partition p that are in
// none of sets.
func missing(ends []int64, sets ...*offsetSet) int64 {
	var n int64
	for p, end := range ends {
		for off := range end {
			found := false
			for _, s := range sets {
				if s.has(p, off) {
					found = true
					break
				}
			}
			if !found {
				n++
			}
		}
	}
	return n
}

// verdict turns the figures into violations.
func (st *soak) verdict(sr *SoakReport, rep *Report, baseline, ref, final Sample, ends [][]int64) {
	r := st.r
	if e := st.sampleErr.Load(); e != nil {
		sr.violate("sampling the gateway: %v", e)
	}
	if rep.Sent == 0 {
		sr.violate("nothing was published")
	}
	if n := r.c.publishErrors.Load(); n > 0 {
		sr.violate("%d publish(es) failed", n)
	}
	if n := r.c.connFailures.Load(); n > 0 {
		first, _ := st.failedConn.Load().(string)
		sr.violate("%d connection(s) failed; first: %s", n, first)
	}
	if n := st.epochChanges.Load(); n > 0 {
		sr.violate("the gateway's epoch changed %d time(s) during the run", n)
	}
	if n := st.errorFrames.Load(); n > 0 {
		st.frameErrMu.Lock()
		first := strings.Join(st.frameErrs, " | ")
		st.frameErrMu.Unlock()
		sr.violate("clients received %d unexpected frame(s) (errors other than a late ack's not_in_flight); first: %s", n, first)
	}
	if r.c.publishErrors.Load() == 0 {
		for t := range ends {
			var inLog int64
			for p, e := range ends[t] {
				inLog += e
				if lo := st.lastOffset[t][p].Load(); lo > e {
					sr.violate("topic %s partition %d: a publish was confirmed at offset %d but the log ends at %d", r.topics[t], p, lo-1, e)
				}
			}
			if c := st.confirmed[t].Load(); c != inLog {
				sr.violate("topic %s: %d publishes confirmed, %d records in the log", r.topics[t], c, inLog)
			}
		}
	}
	for _, c := range sr.Classes {
		if c.Duplicates > 0 || c.Unaccounted > 0 || c.BadGaps > 0 {
			sr.violate("%s subscribers: %d duplicate or out-of-order deliveries, %d records lost without a gap, %d gaps overlapping deliveries",
				c.Name, c.Duplicates, c.Unaccounted, c.BadGaps)
		}
		if c.Delivered+c.GapRecords != c.Expected && c.Unaccounted == 0 {
			sr.violate("%s subscribers: delivered %d + gap records %d != %d records of their topics", c.Name, c.Delivered, c.GapRecords, c.Expected)
		}
		if c.Disconnects > 0 {
			sr.violate("%s subscribers: the gateway closed %d connection(s)", c.Name, c.Disconnects)
		}
		if c.NotRecovered > 0 {
			sr.violate("%s subscribers: %d resume(s) answered recovered:false", c.Name, c.NotRecovered)
		}
	}
	g := sr.Group
	if g.Records == 0 {
		sr.violate("nothing reached the group topic")
	}
	if g.Unacked > 0 {
		sr.violate("group: %d of %d records never acked by any member", g.Unacked, g.Records)
	}
	if g.AckedRedelivered > 0 {
		sr.violate("group: %d deliveries of records already acked", g.AckedRedelivered)
	}
	if g.Lag != 0 {
		sr.violate("group: committed offsets %d short of the log's end", g.Lag)
	}
	if g.DeadLetters > 0 {
		sr.violate("group: %d dead letter(s)", g.DeadLetters)
	}
	if !r.cfg.inprocess {
		if pid := r.cfg.serverPID; pid > 0 {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
				sr.violate("gateway process %d is gone", pid)
			}
		}
		if err := st.healthy(context.Background()); err != nil {
			sr.violate("gateway health: %v", err)
		}
	}
	if final.Goroutines > baseline.Goroutines+int64(sr.Bounds.GoroutineSlack) {
		sr.violate("goroutines: %d after the load, baseline %d + slack %d (checked for %v after every connection closed)%s",
			final.Goroutines, baseline.Goroutines, sr.Bounds.GoroutineSlack, settleTimeout, stacksNote(st.leftStacks))
	}
	if growth := final.HeapBytes - ref.HeapBytes; growth >= sr.Bounds.MaxHeapGrowthBytes {
		sr.violate("heap grew %.1f MiB from %.1fs to the end (bound %d MiB)",
			float64(growth)/(1<<20), ref.T, sr.Bounds.MaxHeapGrowthBytes>>20)
	}
}

// logEnds reads every topic's partitions' next offsets, and the bytes the
// log holds.
func (st *soak) logEnds(ctx context.Context) ([][]int64, int64, error) {
	r := st.r
	ends := make([][]int64, len(r.topics))
	var total int64
	for i, t := range r.topics {
		var info struct {
			Offsets []struct {
				Partition int   `json:"partition"`
				Next      int64 `json:"next"`
				Bytes     int64 `json:"bytes"`
			} `json:"offsets"`
		}
		if err := st.getJSON(ctx, "/v1/topics/"+t, &info); err != nil {
			return nil, 0, err
		}
		ends[i] = make([]int64, st.parts[i])
		for _, o := range info.Offsets {
			if o.Partition >= 0 && o.Partition < len(ends[i]) {
				ends[i][o.Partition] = o.Next
			}
			total += o.Bytes
		}
	}
	return ends, total, nil
}

// groupState reads how far the group's committed offsets are behind ends
// and how many dead letters it has.
func (st *soak) groupState(ctx context.Context, ends []int64) (lag, deadLetters int64, err error) {
	var g struct {
		Partitions []struct {
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			Committed int64  `json:"committed"`
		} `json:"partitions"`
	}
	if err := st.getJSON(ctx, "/v1/groups/"+st.group, &g); err != nil {
		return 0, 0, err
	}
	committed := make([]int64, len(ends))
	for _, p := range g.Partitions {
		if p.Topic == st.r.topics[st.gtopic] && p.Partition >= 0 && p.Partition < len(ends) {
			committed[p.Partition] = p.Committed
		}
	}
	for p, e := range ends {
		lag += max(0, e-committed[p])
	}
	var dl struct {
		DeadLetters []json.RawMessage `json:"deadletters"`
	}
	if err := st.getJSON(ctx, "/v1/deadletters?group="+st.group+"&limit=1000", &dl); err != nil {
		return lag, 0, err
	}
	return lag, int64(len(dl.DeadLetters)), nil
}

func (st *soak) healthy(ctx context.Context) error {
	var h struct {
		Status string `json:"status"`
	}
	if err := st.getJSON(ctx, "/healthz", &h); err != nil {
		return err
	}
	if h.Status != "ok" {
		return fmt.Errorf("/healthz status %q", h.Status)
	}
	return nil
}

func (st *soak) getJSON(ctx context.Context, path string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, st.r.cfg.httpURL+path, nil)
	if err != nil {
		return err
	}
	resp, err := st.r.httpc.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: HTTP %d: %.200s", path, resp.StatusCode, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// stacksNote appends the goroutines left over to a verdict, when known.
func stacksNote(stacks string) string {
	if stacks == "" {
		return ""
	}
	return "; left over, by stack:\n" + stacks
}
