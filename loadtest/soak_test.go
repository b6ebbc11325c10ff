package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
)

// TestSoakShort runs the soak scenario against an embedded gateway for five
// seconds: every invariant of the 60 s CI run must hold, and each part of the
// mixed load must actually have happened.
func TestSoakShort(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"soak", "--inprocess", "--duration", "5s",
		"--sample-interval", "1s", "--json", "--quiet"}, &stdout, &stderr)
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit code %d, report: %v\nstderr:\n%s\nstdout:\n%s", code, err, stderr.String(), stdout.String())
	}
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
	}
	s := rep.Soak
	if s == nil || !s.Passed || len(s.Violations) != 0 {
		t.Fatalf("soak report %+v", s)
	}
	// The invariants held; now check that the load they held under was
	// the mixed load the scenario promises.
	if s.WSPublish == 0 || s.HTTPPub == 0 || rep.Sent != s.WSPublish+s.HTTPPub || s.LogRecords != rep.Sent {
		t.Errorf("publishes: ws %d, http %d, sent %d, log %d", s.WSPublish, s.HTTPPub, rep.Sent, s.LogRecords)
	}
	classes := map[string]SoakClass{}
	for _, c := range s.Classes {
		classes[c.Name] = c
		if c.Expected == 0 || c.Delivered+c.GapRecords != c.Expected || c.Duplicates != 0 || c.Unaccounted != 0 {
			t.Errorf("class %+v", c)
		}
	}
	if c := classes["fast"]; c.Subscribers == 0 || c.WithGaps != 0 || c.Delivered != c.Expected {
		t.Errorf("fast readers %+v: they must get everything without gaps", c)
	}
	if c := classes["slow"]; c.Subscribers == 0 {
		t.Errorf("no slow readers: %+v", c)
	} else if c.GapRecords == 0 {
		// Not an invariant, but the run should exercise gap accounting.
		t.Logf("slow readers lost nothing this time: %+v", c)
	}
	if c := classes["churn"]; c.Subscribers == 0 || c.Reconnects == 0 || c.Delivered != c.Expected {
		t.Errorf("churners %+v: they must reconnect and, resuming, get everything", c)
	}
	g := s.Group
	if g.Records == 0 || g.Unacked != 0 || g.Lag != 0 || g.Nacks == 0 || g.Rejoins == 0 || g.MidAck+g.InFlightCloses == 0 {
		t.Errorf("group %+v", g)
	}
	phases := map[string]int{}
	for _, x := range s.Samples {
		phases[x.Phase]++
		if x.Goroutines <= 0 || x.HeapBytes <= 0 {
			t.Errorf("sample %+v", x)
		}
	}
	if phases["baseline"] != 1 || phases["load"] < 3 || phases["final"] != 1 {
		t.Errorf("samples by phase %v", phases)
	}
	if s.Goroutines.Final > s.Goroutines.Baseline+int64(s.Bounds.GoroutineSlack) {
		t.Errorf("goroutines %+v", s.Goroutines)
	}
}

// TestSoakHostileShort runs the soak with its hostile clients for five
// seconds: the soak's invariants and the hostile bounds hold, every hostile
// client ran, and the limits they aim at were met.
func TestSoakHostileShort(t *testing.T) {
	var stdout, stderr bytes.Buffer
	// The limits themselves are required by the longer run in .ci/run; five
	// seconds under the race detector can end before the slowest is met.
	code := run(context.Background(), []string{"soak", "--inprocess", "--hostile", "--duration", "5s",
		"--sample-interval", "1s", "--hostile-require-limits=false", "--json", "--quiet"}, &stdout, &stderr)
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("exit code %d, report: %v\nstderr:\n%s", code, err, stderr.String())
	}
	if code != 0 || rep.Soak == nil || !rep.Soak.Passed {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
	}
	h := rep.Soak.Hostile
	if h == nil || len(h.Actors) == 0 || h.PeakHeap == 0 {
		t.Fatalf("hostile report %+v", h)
	}
	for _, a := range h.Actors {
		if a.Attempts == 0 {
			t.Errorf("hostile client %s never ran", a.Name)
		}
	}
}

// TestSoakReaderAccounting feeds one subscriber's frames and checks how
// they are accounted: per stream, offsets delivered and gap ranges must
// cover the log exactly once, in order.
func TestSoakReaderAccounting(t *testing.T) {
	msg := func(off string) string {
		return `{"op":"message","pattern":"p","topic":"lt.x.soak.t0","partition":1,"offset":` + off + `,"data":"T0000000000000000001"}`
	}
	gap := func(from, to string) string {
		return `{"op":"gap","pattern":"p","topic":"lt.x.soak.t0","partition":1,"from":` + from + `,"to":` + to + `,"reason":"queue_full"}`
	}
	tests := []struct {
		name                                          string
		lines                                         []string
		next, delivered, dups, unaccounted, gaps, bad int64
	}{
		{"in order", []string{msg("0"), msg("1"), msg("2")}, 3, 3, 0, 0, 0, 0},
		{"duplicate", []string{msg("0"), msg("1"), msg("1")}, 2, 2, 1, 0, 0, 0},
		{"out of order", []string{msg("0"), msg("2"), msg("1")}, 3, 2, 1, 1, 0, 0},
		{"skip without gap", []string{msg("0"), msg("5")}, 6, 2, 0, 4, 0, 0},
		{"gap accounts", []string{msg("0"), gap("1", "4"), msg("4")}, 5, 2, 0, 0, 3, 0},
		{"gap after a hole", []string{msg("0"), gap("2", "4"), msg("4")}, 5, 2, 0, 1, 2, 0},
		{"gap over deliveries", []string{msg("0"), msg("1"), gap("1", "3"), msg("3")}, 4, 3, 0, 0, 1, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRunner(&config{}, &bytes.Buffer{})
			r.setTopics("soak", 1)
			st := &soak{r: r}
			rd := &soakReader{st: st, next: [][]atomic.Int64{make([]atomic.Int64, 2)}}
			for _, l := range tt.lines {
				rd.line([]byte(l))
			}
			got := []int64{rd.next[0][1].Load(), rd.delivered.Load(), rd.dups.Load(), rd.unaccounted.Load(), rd.gapRecords.Load(), rd.badGaps.Load()}
			want := []int64{tt.next, tt.delivered, tt.dups, tt.unaccounted, tt.gaps, tt.bad}
			if !slices.Equal(got, want) {
				t.Fatalf("next, delivered, dups, unaccounted, gap records, bad gaps = %v, want %v", got, want)
			}
			if st.errorFrames.Load() != 0 {
				t.Fatalf("error frames: %v", st.frameErrs)
			}
		})
	}
}

// TestSoakVerdict checks that each kind of failure becomes a violation with
// a message that names it.
func TestSoakVerdict(t *testing.T) {
	ok := func() (*SoakReport, *Report, Sample, Sample, Sample) {
		sr := &SoakReport{Passed: true, Bounds: SoakBounds{GoroutineSlack: 10, MaxHeapGrowthBytes: 64 << 20}}
		sr.Classes = []SoakClass{{Name: "fast", Expected: 10, Delivered: 10}}
		sr.Group = SoakGroup{Records: 5, Acked: 5}
		return sr, &Report{Sent: 10}, Sample{Goroutines: 6}, Sample{HeapBytes: 10 << 20}, Sample{Goroutines: 6, HeapBytes: 12 << 20}
	}
	tests := []struct {
		name   string
		mutate func(sr *SoakReport, base, ref, final *Sample)
		want   string
	}{
		{"passes", func(*SoakReport, *Sample, *Sample, *Sample) {}, ""},
		{"goroutine leak", func(_ *SoakReport, _, _, f *Sample) { f.Goroutines = 17 }, "goroutines: 17"},
		{"heap growth", func(_ *SoakReport, _, _, f *Sample) { f.HeapBytes = 80 << 20 }, "heap grew"},
		{"loss", func(sr *SoakReport, _, _, _ *Sample) { sr.Classes[0].Unaccounted = 2 }, "2 records lost without a gap"},
		{"duplicate", func(sr *SoakReport, _, _, _ *Sample) { sr.Classes[0].Duplicates = 1 }, "1 duplicate"},
		{"dropped", func(sr *SoakReport, _, _, _ *Sample) { sr.Classes[0].Disconnects = 1 }, "closed 1 connection"},
		{"unacked", func(sr *SoakReport, _, _, _ *Sample) { sr.Group.Unacked = 1 }, "never acked"},
		{"acked redelivered", func(sr *SoakReport, _, _, _ *Sample) { sr.Group.AckedRedelivered = 1 }, "already acked"},
		{"lag", func(sr *SoakReport, _, _, _ *Sample) { sr.Group.Lag = 3 }, "committed offsets 3 short"},
		{"dead letters", func(sr *SoakReport, _, _, _ *Sample) { sr.Group.DeadLetters = 1 }, "dead letter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRunner(&config{inprocess: true}, &bytes.Buffer{})
			st := &soak{r: r}
			sr, rep, base, ref, final := ok()
			tt.mutate(sr, &base, &ref, &final)
			st.verdict(sr, rep, base, ref, final, nil)
			got := strings.Join(sr.Violations, "\n")
			if tt.want == "" {
				if got != "" || !sr.Passed {
					t.Fatalf("violations: %s", got)
				}
				return
			}
			if !strings.Contains(got, tt.want) || sr.Passed {
				t.Fatalf("violations %q, want one containing %q", got, tt.want)
			}
		})
	}
	t.Run("gateway problems", func(t *testing.T) {
		sr, _, _, _, _ := ok()
		p := &problemLog{}
		p.add("ERROR request failed")
		sr.checkInProcess(nil, p)
		if sr.Passed || !strings.Contains(strings.Join(sr.Violations, ""), "ERROR request failed") {
			t.Fatalf("violations %q", sr.Violations)
		}
	})
}
