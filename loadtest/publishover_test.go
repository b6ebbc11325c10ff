package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
)

// TestPublishOverInProcess runs the fanout scenario in three phases, one
// per --publish-over mode, against an embedded gateway: each phase is
// served what it offered, every subscriber gets every record of every
// phase (--messages of them, well within --duration), and the batch
// phase sends full batches.
func TestPublishOverInProcess(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"fanout", "--inprocess", "--duration", "20s", "--subscribers", "5",
		"--rate", "0", "--messages", "300", "--publish-over", "ws,http,http-batch", "--http-conns", "4", "--batch", "20",
		"--json", "--quiet"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit code %d; stderr:\n%s", code, stderr.String())
	}
	var rep Report
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("report: %v\n%s", err, stdout.String())
	}
	if len(rep.PublishOver) != 3 {
		t.Fatalf("phases %+v, want ws, http, http-batch", rep.PublishOver)
	}
	var served int64
	for i, want := range []string{"ws", "http", "http-batch"} {
		ph := rep.PublishOver[i]
		if ph.Over != want || ph.Served == 0 || ph.Errors != 0 || ph.Delivered != ph.Served*5 {
			t.Errorf("phase %d: %+v, want %s served with every record delivered to 5 subscribers", i, ph, want)
		}
		served += ph.Served
	}
	// At --rate 0 every batch request is full: 75 records per
	// connection in batches of at most 20.
	if b := rep.PublishOver[2]; b.Served != 300 || b.Requests != 16 {
		t.Errorf("batch phase: %d requests for %d records, want 16 for 300", b.Requests, b.Served)
	}
	if h := rep.PublishOver[1]; h.Requests != h.Served || h.RequestLatency == nil || h.RequestLatency.Count != h.Requests {
		t.Errorf("http phase: %+v, want one request per record, each timed", h)
	}
	if rep.Sent != served || rep.Lost != 0 || rep.Duplicates != 0 || rep.Delivered != served*5 {
		t.Fatalf("sent %d (phases %d), lost %d, duplicates %d, delivered %d", rep.Sent, served, rep.Lost, rep.Duplicates, rep.Delivered)
	}
}
