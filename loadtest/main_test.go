package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestSmokeInProcess runs the CI smoke scenario against an embedded
// gateway: nothing may be lost or repeated.
func TestSmokeInProcess(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"smoke", "--inprocess", "--duration", "2s",
		"--subscribers", "4", "--rate", "200", "--json", "--quiet"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s\nstdout:\n%s", code, stderr.String(), stdout.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if rep.Sent == 0 {
		t.Fatal("nothing was sent")
	}
	if rep.Lost != 0 || rep.Duplicates != 0 || rep.ConnectErrors != 0 {
		t.Fatalf("lost %d, duplicates %d, connect errors %d", rep.Lost, rep.Duplicates, rep.ConnectErrors)
	}
	if rep.Delivered != rep.Sent*4 || rep.Expected != rep.Sent*4 {
		t.Fatalf("delivered %d, expected %d, want sent × subscribers = %d", rep.Delivered, rep.Expected, rep.Sent*4)
	}
	if rep.Latency.Count != rep.Delivered {
		t.Fatalf("latency samples %d, want %d", rep.Latency.Count, rep.Delivered)
	}
}

// TestScenariosInProcess runs every other scenario briefly to keep them
// working; it checks only what each must guarantee.
func TestScenariosInProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	tests := []struct {
		args  []string
		check func(*testing.T, *Report)
	}{
		{[]string{"fanout", "--subscribers", "10", "--rate", "500"}, func(t *testing.T, r *Report) {
			if r.Lost != 0 || r.Delivered != r.Sent*10 {
				t.Errorf("lost %d, delivered %d of %d", r.Lost, r.Delivered, r.Sent*10)
			}
		}},
		{[]string{"wildcard", "--subscribers", "8", "--topics", "6", "--patterns", "3"}, func(t *testing.T, r *Report) {
			if r.Lost != 0 || r.Delivered != r.Expected || r.Expected == 0 {
				t.Errorf("lost %d, delivered %d of %d", r.Lost, r.Delivered, r.Expected)
			}
		}},
		{[]string{"groups", "--members", "3", "--rate", "300", "--nack-share", "0.2", "--drain", "10s"}, func(t *testing.T, r *Report) {
			if r.Lost != 0 || r.Nacks == 0 || r.Redeliveries == 0 {
				t.Errorf("lost %d, nacks %d, redeliveries %d", r.Lost, r.Nacks, r.Redeliveries)
			}
		}},
		{[]string{"slow", "--subscribers", "4", "--slow-share", "0.25", "--rate", "2000", "--drain", "1s"}, func(t *testing.T, r *Report) {
			if len(r.Classes) != 2 || r.Classes[0].Lost != 0 {
				t.Errorf("classes %+v: fast subscribers must lose nothing", r.Classes)
			}
		}},
		{[]string{"connect", "--subscribers", "50"}, func(t *testing.T, r *Report) {
			if r.Connections != 50 || r.Connect.Count != 50 {
				t.Errorf("connections %d, connect samples %d", r.Connections, r.Connect.Count)
			}
		}},
		{[]string{"idle", "--subscribers", "20", "--topics", "4", "--rate", "20"}, func(t *testing.T, r *Report) {
			if r.Lost != 0 || r.Delivered != r.Expected {
				t.Errorf("lost %d, delivered %d of %d", r.Lost, r.Delivered, r.Expected)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.args[0], func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(tt.args, "--inprocess", "--duration", "1s", "--json", "--quiet")
			if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d: %s", code, stderr.String())
			}
			var rep Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			tt.check(t, &rep)
		})
	}
}

func TestFlags(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"no scenario", nil, "missing scenario"},
		{"unknown scenario", []string{"flood"}, "unknown scenario"},
		{"tiny payload", []string{"fanout", "--size", "3"}, "--size"},
		{"too many connections", []string{"idle", "--subscribers", "50", "--max-conns", "10"}, "max-conns"},
		{"bad policy", []string{"slow", "--on-full", "explode"}, "--on-full"},
		{"nats groups", []string{"groups", "--target", "nats"}, "--target nats runs"},
		{"nats in process", []string{"fanout", "--target", "nats", "--inprocess"}, "--inprocess"},
		{"bad target", []string{"fanout", "--target", "kafka"}, "--target"},
		{"ok", []string{"fanout", "--subscribers", "3"}, ""},
		{"ok nats", []string{"idle", "--target", "nats"}, ""},
		{"bad publish-over", []string{"fanout", "--publish-over", "ws,carrier-pigeon"}, "--publish-over"},
		{"http publish to nats", []string{"fanout", "--target", "nats", "--publish-over", "http"}, "--publish-over"},
		{"http publish in groups", []string{"groups", "--publish-over", "http"}, "--publish-over"},
		{"batch too large", []string{"fanout", "--publish-over", "http-batch", "--batch", "1001"}, "--batch"},
		{"ok publish-over", []string{"fanout", "--publish-over", "ws, http,http-batch"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := parseFlags(tt.args, &bytes.Buffer{})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestLoopbackOnly(t *testing.T) {
	tests := []struct {
		url string
		ok  bool
	}{
		{"ws://127.0.0.1:8080", true},
		{"ws://[::1]:8080/v1/ws", true},
		{"ws://localhost:8080", true},
		{"ws://10.1.2.3:8080", false},
		{"ws://192.168.0.1", false},
		{"ftp://127.0.0.1", false},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			ws, httpu, err := resolveURLs(context.Background(), tt.url, "", true)
			if (err == nil) != tt.ok {
				t.Fatalf("err = %v, want ok=%v", err, tt.ok)
			}
			if tt.ok && (!strings.HasSuffix(ws, "/v1/ws") || !strings.HasPrefix(httpu, "http://")) {
				t.Fatalf("urls %q %q", ws, httpu)
			}
		})
	}
}

var parseTests = []struct {
	name                 string
	line                 string
	op                   []byte
	offset, partition    int64
	topic                int
	sent                 int64
	hasTime, hasTopicNum bool
}{
	{"message", `{"op":"message","pattern":"lt.x.*","topic":"lt.x.t12","partition":3,"offset":4567,"data":"T1700000000123456789xxxx","time":"2026-11-29T08:00:00.123Z"}`,
		opMessage, 4567, 3, 12, 1700000000123456789, true, true},
	{"group message", `{"op":"message","pattern":"p","topic":"lt.g.t0","partition":0,"offset":0,"key":"k","headers":{"a":"b"},"data":"T0000000000000000001","time":"x","group":"g","attempt":2}`,
		opMessage, 0, 0, 0, 1, true, true},
	{"gap", `{"op":"gap","pattern":"p","topic":"lt.t7","partition":1,"from":10,"to":20,"reason":"queue_full"}`,
		opGap, 0, 1, 7, 0, false, true},
	{"published", `{"op":"published","id":9,"topic":"a","partition":0,"offset":99}`,
		opPublished, 99, 0, 0, 0, false, false},
}

func TestParsers(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.name, func(t *testing.T) {
			l := []byte(tt.line)
			if !isOp(l, tt.op) {
				t.Fatalf("isOp(%s) false", tt.op)
			}
			if tt.op != nil && !bytes.Equal(tt.op, opMessage) && isOp(l, opMessage) {
				t.Fatal("isOp(message) true")
			}
			if off, _ := intAfter(l, keyOffset); off != tt.offset {
				t.Errorf("offset %d, want %d", off, tt.offset)
			}
			if p, _ := intAfter(l, keyPartition); p != tt.partition {
				t.Errorf("partition %d, want %d", p, tt.partition)
			}
			if ti, ok := topicIndex(l); ok != tt.hasTopicNum || ti != tt.topic {
				t.Errorf("topic index %d %v, want %d %v", ti, ok, tt.topic, tt.hasTopicNum)
			}
			if st, ok := sendTime(l); ok != tt.hasTime || st != tt.sent {
				t.Errorf("send time %d %v, want %d %v", st, ok, tt.sent, tt.hasTime)
			}
		})
	}
}

func FuzzParsers(f *testing.F) {
	for _, tt := range parseTests {
		f.Add([]byte(tt.line))
	}
	f.Fuzz(func(t *testing.T, l []byte) {
		// Any input: no panic.
		isOp(l, opMessage)
		intAfter(l, keyOffset)
		topicIndex(l)
		sendTime(l)
	})
}

func TestAppendPublish(t *testing.T) {
	now := time.Unix(1700000000, 123456789)
	for _, size := range []int{minPayload, 64, 1000} {
		b := appendPublish(nil, 7, "lt.a.t3", size, now)
		var req struct {
			Op    string `json:"op"`
			ID    int    `json:"id"`
			Topic string `json:"topic"`
			Data  json.RawMessage
		}
		if err := json.Unmarshal(b, &req); err != nil {
			t.Fatalf("size %d: %v: %s", size, err, b)
		}
		if req.Op != "publish" || req.ID != 7 || req.Topic != "lt.a.t3" || len(req.Data) != size {
			t.Fatalf("size %d: %+v (data %d bytes)", size, req, len(req.Data))
		}
		msg := []byte(`{"op":"message","pattern":"p","topic":"lt.a.t3","partition":0,"offset":1,"data":` + string(req.Data) + `}`)
		if st, ok := sendTime(msg); !ok || st != now.UnixNano() {
			t.Fatalf("send time %d %v", st, ok)
		}
	}
}

// TestLineAllocs checks that handling a delivery allocates nothing.
func TestLineAllocs(t *testing.T) {
	r := newRunner(&config{slowDelay: 0}, &bytes.Buffer{})
	s := &subscriber{r: r}
	l := []byte(parseTests[0].line)
	s.line(l) // grow the position table once
	allocs := testing.AllocsPerRun(1000, func() { s.line(l) })
	if allocs != 0 {
		t.Fatalf("%v allocations per delivery", allocs)
	}
}

func BenchmarkLine(b *testing.B) {
	r := newRunner(&config{}, &bytes.Buffer{})
	s := &subscriber{r: r}
	l := []byte(parseTests[0].line)
	b.ReportAllocs()
	for b.Loop() {
		s.line(l)
	}
}

func TestChart(t *testing.T) {
	dir := t.TempDir()
	var files []string
	for i, rate := range []float64{1e5, 5e5, 1e6} {
		r := Report{Scenario: "fanout", DeliveriesPerS: rate,
			Latency: Percentiles{Count: 10, P50: float64(i + 1), P90: float64(2 * (i + 1)), P99: float64(5 * (i + 1)), P999: 40}}
		data, _ := json.Marshal(r)
		f := filepath.Join(dir, fmt.Sprintf("r%d.json", i))
		if err := os.WriteFile(f, data, 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	var out bytes.Buffer
	if err := chartCommand(files, &out); err != nil {
		t.Fatal(err)
	}
	svg := out.String()
	if !strings.HasPrefix(svg, "<svg") || strings.Count(svg, "<polyline") != 4 || !strings.Contains(svg, "p99.9") {
		t.Fatalf("unexpected chart:\n%s", svg)
	}
	if err := chartCommand(nil, &out); err == nil {
		t.Fatal("chart without reports succeeded")
	}
}
