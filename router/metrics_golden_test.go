package router_test

import (
	"flag"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

var updateMetrics = flag.Bool("update-metrics", false, "rewrite testdata/metrics_golden.txt from a fresh gateway")

// seriesLine matches a sample line of the text exposition: its name and
// labels, without the value.
var seriesLine = regexp.MustCompile(`^(switchyard_[a-z_]+(?:\{[^}]*\})?) \S+$`)

// metricsShape is the HELP and TYPE of every switchyard_ family of a fresh
// gateway and each of its series (name and labels, no values), sorted; the
// build version label is written as "V".
func metricsShape(text string) string {
	version := regexp.MustCompile(`version="[^"]*"`)
	var out []string
	for _, l := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(l, "# HELP switchyard_"), strings.HasPrefix(l, "# TYPE switchyard_"):
			out = append(out, l)
		default:
			if m := seriesLine.FindStringSubmatch(l); m != nil {
				out = append(out, version.ReplaceAllString(m[1], `version="V"`))
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n") + "\n"
}

// TestMetricsGolden: the names, labels, types and help texts a fresh
// gateway exposes are those recorded in testdata/metrics_golden.txt
// (rewrite it with -update-metrics after a deliberate change, and say so
// in docs/metrics.md).
func TestMetricsGolden(t *testing.T) {
	g := newGateway(t)
	got := metricsShape(g.scrape(t))
	const path = "testdata/metrics_golden.txt"
	if *updateMetrics {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got == string(want) {
		return
	}
	wantSet := map[string]bool{}
	for _, l := range strings.Split(string(want), "\n") {
		wantSet[l] = true
	}
	gotSet := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		gotSet[l] = true
		if !wantSet[l] {
			t.Errorf("new: %s", l)
		}
	}
	for l := range wantSet {
		if !gotSet[l] {
			t.Errorf("gone: %s", l)
		}
	}
}

// TestSysStatsTotals: a $sys.stats frame has its documented fields, and
// its totals count each event once: three publishes delivered to one
// plain subscriber show as three publishes and three deliveries.
func TestSysStatsTotals(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.StatsInterval = 10 * time.Millisecond })
	sub := g.dial(t)
	sub.subscribe(t, "stats.x")
	pub := g.dial(t)
	for i := range 3 {
		pub.publish(t, "stats.x", i)
	}
	for range 3 {
		sub.nextOp(t, "message")
	}
	// Subscribed only now: no $sys.stats frame was delivered before, so
	// the first one computed after the events counts exactly them. A
	// frame computed while this subscribe was being made may be
	// delivered to it without counting it: the check reads on to one
	// computed after (it counts both subscriptions, and the frames
	// delivered before it among the deliveries).
	st := g.dial(t)
	st.subscribe(t, "$sys.stats")
	var d map[string]any
	deadline := time.Now().Add(waitTimeout)
	skipped := 0
	for n := 0; ; n, skipped = n+1, skipped+1 {
		if n > 1000 || time.Now().After(deadline) {
			t.Fatalf("no $sys.stats frame showing 3 publishes and 2 plain subscriptions; last %v", d)
		}
		m := st.nextOp(t, "message")
		d, _ = m["data"].(map[string]any)
		tot, _ := d["totals"].(map[string]any)
		subs, _ := d["subscriptions"].(map[string]any)
		if tot != nil && tot["publishes"] == float64(3) && subs != nil && subs["plain"] == float64(2) {
			break
		}
	}
	keys := func(v any) string {
		m, _ := v.(map[string]any)
		var ks []string
		for k := range m {
			ks = append(ks, k)
		}
		sort.Strings(ks)
		return strings.Join(ks, ",")
	}
	for _, c := range []struct{ got, want string }{
		{keys(d), "connections,rates,slow_consumers,subscriptions,time,top_topics,totals,uptime_s"},
		{keys(d["rates"]), "bytes_in,bytes_out,deliveries,drops,publishes"},
		{keys(d["totals"]), "dead_letters,deliveries,drops,gaps,publishes"},
		{keys(d["subscriptions"]), "group,plain"},
	} {
		if c.got != c.want {
			t.Errorf("$sys.stats fields %s, want %s", c.got, c.want)
		}
	}
	tot := d["totals"].(map[string]any)
	want := map[string]float64{"publishes": 3, "deliveries": float64(3 + skipped), "drops": 0, "gaps": 0, "dead_letters": 0}
	for k, v := range want {
		if tot[k] != v {
			t.Errorf("totals.%s = %v, want %v (%v)", k, tot[k], v, d)
		}
	}
	subs := d["subscriptions"].(map[string]any)
	if subs["plain"] != float64(2) || subs["group"] != float64(0) {
		t.Errorf("subscriptions = %v, want 2 plain (stats.x, $sys.stats), 0 group", subs)
	}
	if d["connections"] != float64(3) {
		t.Errorf("connections = %v, want 3", d["connections"])
	}
}

// TestBytesMetrics: switchyard_bytes_in_total and bytes_out_total count
// the payload bytes of sessions, and keep those of sessions that ended.
func TestBytesMetrics(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "bytes.x")
	c.publish(t, "bytes.x", "hello")
	c.nextOp(t, "message")
	in1 := metricValue(t, g.reg, "switchyard_bytes_in_total", nil)
	out1 := metricValue(t, g.reg, "switchyard_bytes_out_total", nil)
	// The welcome, two replies and a message frame went out; a subscribe
	// and a publish frame came in.
	if in1 < 40 || out1 < 100 {
		t.Fatalf("bytes_in_total %v, bytes_out_total %v after a subscribe, a publish and their frames", in1, out1)
	}
	if err := c.conn.Close(websocket.StatusNormalClosure, ""); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(waitTimeout)
	for metricValue(t, g.reg, "switchyard_connections", nil) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the session did not end")
		}
		time.Sleep(time.Millisecond)
	}
	in2 := metricValue(t, g.reg, "switchyard_bytes_in_total", nil)
	out2 := metricValue(t, g.reg, "switchyard_bytes_out_total", nil)
	if in2 != in1 || out2 < out1 {
		t.Errorf("after the session ended: bytes_in_total %v (was %v), bytes_out_total %v (was %v)", in2, in1, out2, out1)
	}
}
