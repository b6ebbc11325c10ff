package main

// The soak scenario's report: its types and its table.

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// SoakReport is the soak scenario's part of the report.
type SoakReport struct {
	Bounds     SoakBounds     `json:"bounds"`
	Samples    []Sample       `json:"samples"`
	Goroutines SoakDelta      `json:"goroutines"`
	Heap       SoakDelta      `json:"heap_bytes"`
	LogRecords int64          `json:"log_records"`
	LogBytes   int64          `json:"log_bytes"`
	WSPublish  int64          `json:"ws_publishes"`
	DrainS     float64        `json:"drain_s"` // how long the drain waited for the subscribers and the group
	HTTPPub    int64          `json:"http_publishes"`
	Classes    []SoakClass    `json:"classes"`
	Group      SoakGroup      `json:"group"`
	ErrorFrame int64          `json:"error_frames"`
	Gateway    []string       `json:"gateway_problems,omitempty"`
	Hostile    *HostileReport `json:"hostile,omitempty"`
	Violations []string       `json:"violations"`
	Passed     bool           `json:"passed"`
}

// SoakBounds are the limits the run was checked against.
type SoakBounds struct {
	GoroutineSlack     int     `json:"goroutine_slack"`
	MaxHeapGrowthBytes int64   `json:"max_heap_growth_bytes"`
	WarmupS            float64 `json:"warmup_s"`
	HeapMeasure        string  `json:"heap_measure"`
}

// SoakDelta is a measure at its reference point and at the end.
type SoakDelta struct {
	Baseline int64 `json:"baseline"`
	Final    int64 `json:"final"`
	Growth   int64 `json:"growth"`
}

// Sample is one look at the gateway.
type Sample struct {
	T          float64 `json:"t_s"`
	Phase      string  `json:"phase"` // baseline, load, drain, final
	Goroutines int64   `json:"goroutines"`
	HeapBytes  int64   `json:"heap_bytes"`
	RSSBytes   int64   `json:"rss_bytes,omitempty"`
	Sent       int64   `json:"sent"`
	Delivered  int64   `json:"delivered"`
}

// SoakClass sums up one kind of plain subscriber.
type SoakClass struct {
	Name         string `json:"name"`
	Subscribers  int    `json:"subscribers"`
	Expected     int64  `json:"expected"`
	Delivered    int64  `json:"delivered"`
	Duplicates   int64  `json:"duplicates"`
	Unaccounted  int64  `json:"unaccounted"` // offsets skipped without a gap, or never reached
	GapRecords   int64  `json:"gap_records"`
	BadGaps      int64  `json:"bad_gaps"` // gaps overlapping what was delivered
	WithGaps     int    `json:"with_gaps"`
	Disconnects  int    `json:"disconnects"`
	Reconnects   int64  `json:"reconnects"`
	NotRecovered int64  `json:"not_recovered"`
}

// SoakGroup sums up the consumer group.
type SoakGroup struct {
	Records          int64 `json:"records"` // in the group topic's log
	Acked            int64 `json:"acked"`   // distinct offsets acked (confirmed)
	MidAck           int64 `json:"mid_ack_closes"`
	InFlightCloses   int64 `json:"in_flight_closes"`
	Deliveries       int64 `json:"deliveries"`
	Redeliveries     int64 `json:"redeliveries"`
	Nacks            int64 `json:"nacks"`
	LateAcks         int64 `json:"late_acks"`
	AckedRedelivered int64 `json:"acked_redelivered"`
	Unacked          int64 `json:"unacked"`
	Lag              int64 `json:"lag"`
	DeadLetters      int64 `json:"dead_letters"`
	Rejoins          int64 `json:"rejoins"`
}

func (s *SoakReport) violate(format string, args ...any) {
	s.Violations = append(s.Violations, fmt.Sprintf(format, args...))
	s.Passed = false
}

// checkInProcess adds the embedded gateway's own verdict: how it stopped and
// what it logged.
func (s *SoakReport) checkInProcess(stopErr error, problems *problemLog) {
	if stopErr != nil {
		s.violate("gateway: %v", stopErr)
	}
	n, first := problems.snapshot()
	s.Gateway = first
	if n > 0 {
		s.violate("gateway logged %d warning(s) or error(s); first: %s", n, strings.Join(first, " | "))
	}
	s.Passed = len(s.Violations) == 0
}

func (s *SoakReport) writeTable(p func(string, any)) {
	mib := func(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	p("soak bounds", fmt.Sprintf("goroutines <= baseline+%d; heap growth < %s (%s) after %.0fs warm-up",
		s.Bounds.GoroutineSlack, mib(s.Bounds.MaxHeapGrowthBytes), s.Bounds.HeapMeasure, s.Bounds.WarmupS))
	p("goroutines", fmt.Sprintf("baseline %d, final %d (%+d)", s.Goroutines.Baseline, s.Goroutines.Final, s.Goroutines.Growth))
	p("heap", fmt.Sprintf("after warm-up %s, final %s (%+.1f MiB)", mib(s.Heap.Baseline), mib(s.Heap.Final), float64(s.Heap.Growth)/(1<<20)))
	p("log", fmt.Sprintf("%d records, %s", s.LogRecords, mib(s.LogBytes)))
	p("publishes ws / http", fmt.Sprintf("%d / %d", s.WSPublish, s.HTTPPub))
	p("drain", fmt.Sprintf("%.2fs", s.DrainS))
	for _, c := range s.Classes {
		p("subscribers "+c.Name, fmt.Sprintf("n=%d expected=%d delivered=%d dups=%d unaccounted=%d gap_records=%d bad_gaps=%d with_gaps=%d disconnects=%d reconnects=%d not_recovered=%d",
			c.Subscribers, c.Expected, c.Delivered, c.Duplicates, c.Unaccounted, c.GapRecords, c.BadGaps, c.WithGaps, c.Disconnects, c.Reconnects, c.NotRecovered))
	}
	g := s.Group
	p("group", fmt.Sprintf("records=%d acked=%d unacked=%d deliveries=%d redeliveries=%d nacks=%d late_acks=%d acked_redelivered=%d lag=%d dead_letters=%d",
		g.Records, g.Acked, g.Unacked, g.Deliveries, g.Redeliveries, g.Nacks, g.LateAcks, g.AckedRedelivered, g.Lag, g.DeadLetters))
	p("group churn", fmt.Sprintf("rejoins=%d mid_ack_closes=%d in_flight_closes=%d", g.Rejoins, g.MidAck, g.InFlightCloses))
	p("error frames", s.ErrorFrame)
	if h := s.Hostile; h != nil {
		p("hostile bound", fmt.Sprintf("peak heap during the load <= baseline + %s", mib(h.MaxHeapBytes)))
		p("hostile peak", fmt.Sprintf("heap %s, rss %s", mib(h.PeakHeap), mib(h.PeakRSS)))
		for _, a := range h.Actors {
			p("hostile "+a.Name, fmt.Sprintf("attempts=%d ended_by_gateway=%d", a.Attempts, a.Closed))
		}
		for _, name := range evidenceNames() {
			p("hostile evidence", fmt.Sprintf("%s %d", name, h.Evidence[name]))
		}
		for _, name := range slices.Sorted(maps.Keys(h.Seen)) {
			p("hostile seen", fmt.Sprintf("%s %d", name, h.Seen[name]))
		}
	}
	p("samples", "t_s phase goroutines heap rss sent delivered")
	for _, x := range s.Samples {
		rss := "-"
		if x.RSSBytes > 0 {
			rss = mib(x.RSSBytes)
		}
		p("", fmt.Sprintf("%6.1f %-8s %6d %10s %10s %9d %10d", x.T, x.Phase, x.Goroutines, mib(x.HeapBytes), rss, x.Sent, x.Delivered))
	}
	verdict := "PASS"
	if !s.Passed {
		verdict = fmt.Sprintf("FAIL (%d violations)", len(s.Violations))
	}
	p("soak verdict", verdict)
	for _, v := range s.Violations {
		p("violation", v)
	}
}
