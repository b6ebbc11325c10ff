package router_test

import (
	"strings"
	"testing"
)

// TestAckOffsets: an ack (or nack) with "offsets" settles several records
// of one partition in one frame; each offset is settled on its own, and
// with an id the reply is acked, or one error naming the offsets that
// failed while the others are still settled.
func TestAckOffsets(t *testing.T) {
	g := newGateway(t)
	c := g.dial(t)
	c.subscribe(t, "batch", "group", "many", "max_in_flight", 8)
	pub := g.dial(t)
	for i := range 6 {
		pub.publish(t, "batch", i)
	}
	for i := range 6 {
		if m := c.nextOp(t, "message"); num(m, "offset") != int64(i) {
			t.Fatalf("delivery %d = %v", i, m)
		}
	}
	ack := func(offsets ...int) map[string]any {
		return map[string]any{"op": "ack", "group": "many", "topic": "batch", "partition": 0, "offsets": offsets}
	}
	c.mustOK(t, ack(2, 0, 1), "acked")
	// 9 was never delivered and 1 is acked already: not_in_flight names
	// them, and 3 and 4 are acked all the same.
	m := c.call(t, ack(9, 3, 1, 4))
	if m["code"] != "not_in_flight" || !strings.Contains(m["message"].(string), "[9,1]") {
		t.Fatalf("ack of 9, 3, 1, 4 = %v, want not_in_flight naming [9,1]", m)
	}
	c.mustOK(t, map[string]any{"op": "nack", "group": "many", "topic": "batch", "partition": 0, "offsets": []int{5}, "error": "later"}, "nacked")
	if m := c.nextOp(t, "message"); num(m, "offset") != 5 || num(m, "attempt") != 2 {
		t.Fatalf("after the nack = %v, want offset 5 attempt 2", m)
	}
	c.mustOK(t, ack(5), "acked")
	_, grp, _ := g.httpDo(t, "GET", "/v1/groups/many", nil)
	if p := grp["partitions"].([]any)[0].(map[string]any); num(p, "committed") != 6 {
		t.Fatalf("group partition = %v, want committed 6", p)
	}
	// Without an id a late ack is silent, as for one offset.
	c.send(t, ack(0, 1))
	for _, tt := range []struct {
		name string
		req  map[string]any
	}{
		{"offset and offsets", map[string]any{"op": "ack", "group": "many", "topic": "batch", "partition": 0, "offset": 1, "offsets": []int{1}}},
		{"empty offsets", ack()},
		{"too many offsets", ack(make([]int, 1025)...)},
		{"offsets not numbers", map[string]any{"op": "ack", "group": "many", "topic": "batch", "partition": 0, "offsets": []string{"1"}}},
	} {
		if m := c.call(t, tt.req); m["code"] != "bad_request" {
			t.Errorf("%s: %v, want bad_request", tt.name, m)
		}
	}
}
