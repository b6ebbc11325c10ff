package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestEmbeddedBatchPublish runs POST /v1/publish {"records":[…]} on the
// JetStream engine (--engine embedded), whose appends complete on its own
// goroutines: one result per record in request order, the records stored
// in request order, each msg_id idempotent within and across batches, a
// bad record refused without stopping the others, and every stored
// record delivered once to a subscriber.
func TestEmbeddedBatchPublish(t *testing.T) {
	n := startNode(t, "--engine", "embedded", "--data-dir", t.TempDir(), "--partitions", "1")
	sub := dialNode(t, n)
	sub.send(t, map[string]any{"op": "subscribe", "id": 1, "pattern": "bp.t"})
	sub.expect(t, "subscribed")

	const count = 200
	var sb strings.Builder
	sb.WriteString(`{"records":[`)
	for i := range count {
		if i > 0 {
			sb.WriteByte(',')
		}
		switch {
		case i == 50:
			sb.WriteString(`{"topic":"bp..bad","data":"x"}`)
		case i%10 == 0:
			fmt.Fprintf(&sb, `{"topic":"bp.t","data":"r%d","msg_id":"m%d"}`, i, i)
		default:
			fmt.Fprintf(&sb, `{"topic":"bp.t","data":"r%d"}`, i)
		}
	}
	sb.WriteString(`]}`)
	m := httpPublish(t, n, sb.String())
	res, _ := m["results"].([]any)
	if len(res) != count {
		t.Fatalf("%d results, want %d: %v", len(res), count, m)
	}
	var want []string
	for i, r := range res {
		r := r.(map[string]any)
		if i == 50 {
			if r["code"] != "invalid_topic" {
				t.Fatalf("result 50: %v, want invalid_topic", r)
			}
			continue
		}
		if off, _ := r["offset"].(float64); int(off) != len(want) || r["topic"] != "bp.t" || r["duplicate"] != nil {
			t.Fatalf("result %d: %v, want offset %d", i, r, len(want))
		}
		want = append(want, fmt.Sprintf("r%d", i))
	}
	if got := readLog(t, n, "bp.t"); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("log %v\nwant %v", got, want)
	}
	for i, w := range want {
		f := sub.expect(t, "message")
		if f["data"] != w {
			t.Fatalf("delivery %d: %v, want data %s", i, f, w)
		}
	}

	// The msg_ids again beside new records: the repeats get the first
	// offsets as duplicates, in a batch and (one) alone.
	m = httpPublish(t, n, `{"records":[{"topic":"bp.t","data":"again","msg_id":"m10"},{"topic":"bp.t","data":"new"},{"topic":"bp.t","data":"again","msg_id":"m190"}]}`)
	res, _ = m["results"].([]any)
	if len(res) != 3 {
		t.Fatalf("repeat: %v", m)
	}
	for i, wantOff := range []int{10, len(want), 189} {
		r := res[i].(map[string]any)
		dup := i != 1
		if off, _ := r["offset"].(float64); int(off) != wantOff || (r["duplicate"] == true) != dup {
			t.Fatalf("repeat result %d: %v, want offset %d duplicate %v", i, r, wantOff, dup)
		}
	}
	if m := httpPublish(t, n, `{"topic":"bp.t","data":"again","msg_id":"m0"}`); m["duplicate"] != true || m["offset"] != 0.0 {
		t.Fatalf("single repeat of m0: %v", m)
	}
	if f := sub.expect(t, "message"); f["data"] != "new" {
		t.Fatalf("after the repeats: %v, want the one new record", f)
	}
	if got := readLog(t, n, "bp.t"); len(got) != len(want)+1 {
		t.Fatalf("log has %d records, want %d", len(got), len(want)+1)
	}
}
