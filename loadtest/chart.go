package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strings"
)

// chartCommand reads --json reports and writes an SVG chart of end-to-end
// latency percentiles (p50, p90, p99, p99.9; log scale) against the
// delivered rate: `go run ./loadtest chart a.json b.json ... > chart.svg`.
func chartCommand(files []string, out io.Writer) error {
	if len(files) == 0 {
		return errors.New("usage: loadtest chart REPORT.json... > chart.svg")
	}
	var reps []Report
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var r Report
		if err := json.Unmarshal(data, &r); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		if r.Latency.Count == 0 || r.DeliveriesPerS <= 0 {
			return fmt.Errorf("%s: no latency samples or delivered rate", f)
		}
		reps = append(reps, r)
	}
	sort.Slice(reps, func(i, j int) bool { return reps[i].DeliveriesPerS < reps[j].DeliveriesPerS })
	return writeChart(out, reps)
}

// writeChart draws the chart. It is plain SVG text so that it needs no
// graphics library and renders on any code host.
func writeChart(w io.Writer, reps []Report) error {
	const (
		width, height         = 760, 420
		left, right, top, bot = 70, 150, 40, 50
	)
	pw, ph := float64(width-left-right), float64(height-top-bot)
	maxRate := 0.0
	minLat, maxLat := math.Inf(1), 0.0
	series := []struct {
		name  string
		color string
		get   func(Percentiles) float64
	}{
		{"p50", "#2f6fdf", func(p Percentiles) float64 { return p.P50 }},
		{"p90", "#2a9d6a", func(p Percentiles) float64 { return p.P90 }},
		{"p99", "#e08a1e", func(p Percentiles) float64 { return p.P99 }},
		{"p99.9", "#c8412f", func(p Percentiles) float64 { return p.P999 }},
	}
	for _, r := range reps {
		maxRate = max(maxRate, r.DeliveriesPerS)
		for _, s := range series {
			v := max(s.get(r.Latency), 0.01)
			minLat, maxLat = min(minLat, v), max(maxLat, v)
		}
	}
	lo, hi := math.Floor(math.Log10(minLat)), math.Ceil(math.Log10(maxLat))
	if hi == lo {
		hi++
	}
	maxRate = niceCeil(maxRate)
	x := func(rate float64) float64 { return float64(left) + rate/maxRate*pw }
	y := func(ms float64) float64 {
		return float64(top) + ph - (math.Log10(max(ms, 0.01))-lo)/(hi-lo)*ph
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#fff"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="15" font-weight="bold">End-to-end latency against delivered rate</text>`+"\n", left)
	for e := lo; e <= hi; e++ {
		ms := math.Pow(10, e)
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", left, float64(left)+pw, y(ms), y(ms))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end">%s ms</text>`+"\n", left-6, y(ms)+4, trimFloat(ms))
	}
	for i := 0; i <= 5; i++ {
		rate := maxRate * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#eee"/>`+"\n", x(rate), x(rate), top, float64(top)+ph)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x(rate), float64(top)+ph+18, humanRate(rate))
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">deliveries per second</text>`+"\n", float64(left)+pw/2, height-8)
	for i, s := range series {
		var pts []string
		for _, r := range reps {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(r.DeliveriesPerS), y(s.get(r.Latency))))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", s.color, strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`+"\n", xy[0], xy[1], s.color)
		}
		ly := top + 20 + i*20
		fmt.Fprintf(&b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="%s" stroke-width="2"/>`+"\n", width-right+15, width-right+40, ly, ly, s.color)
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", width-right+46, ly+4, s.name)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return trimFloat(r/1e6) + "M"
	case r >= 1e3:
		return trimFloat(r/1e3) + "k"
	}
	return trimFloat(r)
}

func trimFloat(f float64) string {
	s := fmt.Sprintf("%.2f", f)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s
}
