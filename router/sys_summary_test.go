package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// maxSysRecord is the documented bound on one $sys.topics or $sys.groups
// record (docs/protocol.md, "System topics").
const maxSysRecord = 16 << 10

// sysRecords returns the retained records of a system topic.
func sysRecords(t *testing.T, g *gateway, topic string) []*engine.Record {
	t.Helper()
	recs, _, err := g.eng.Read(context.Background(), topic, 0, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// waitSys polls a system topic until a record satisfies ok, checking every
// record against the byte bound on the way.
func waitSys(t *testing.T, g *gateway, topic string, ok func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for time.Now().Before(deadline) {
		for _, r := range sysRecords(t, g, topic) {
			if len(r.Data) > maxSysRecord {
				t.Fatalf("%s record %d is %d bytes, over %d", topic, r.Offset, len(r.Data), maxSysRecord)
			}
			var m map[string]any
			if err := json.Unmarshal(r.Data, &m); err != nil {
				t.Fatal(err)
			}
			if ok(m) {
				return m
			}
		}
		time.Sleep(20 * time.Millisecond) // polling the log: no event to wait on
	}
	t.Fatalf("no %s record as wanted within %v", topic, waitTimeout)
	return nil
}

// TestSysSummariesBounded: with 20,000 topics (long names), every
// $sys.topics and $sys.groups record is a summary under the byte bound,
// with exact counts, capped lists of what changed and the busiest topics.
func TestSysSummariesBounded(t *testing.T) {
	g := newGateway(t, func(c *gwConfig) { c.router.StatsInterval = 20 * time.Millisecond })
	ctx := context.Background()
	const topics = 20000
	name := func(i int) string { return fmt.Sprintf("spray.%s.t%05d", strings.Repeat("x", 200), i) }
	for i := range topics {
		if _, err := g.eng.CreateTopic(ctx, engine.TopicConfig{Name: name(i)}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if st, m, _ := g.httpDo(t, "POST", fmt.Sprintf("/v1/groups/g%d/poll", i), map[string]any{"pattern": "busy.#"}); st != 200 {
			t.Fatalf("poll: %d %v", st, m)
		}
	}
	c := g.dial(t)
	for range 20 {
		c.publish(t, "busy.one", 1)
	}

	m := waitSys(t, g, "$sys.topics", func(m map[string]any) bool { return num(m, "count") >= topics+1 })
	for _, k := range []string{"created", "deleted", "top"} {
		if l, ok := m[k].([]any); !ok || len(l) > 20 {
			t.Fatalf("%q = %v, want a list of at most 20", k, m[k])
		}
	}
	waitSys(t, g, "$sys.topics", func(m map[string]any) bool {
		top, _ := m["top"].([]any)
		return len(top) > 0 && top[0].(map[string]any)["topic"] == "busy.one"
	})
	for i := range 5 {
		if err := g.eng.DeleteTopic(ctx, name(i)); err != nil {
			t.Fatal(err)
		}
	}
	m = waitSys(t, g, "$sys.topics", func(m map[string]any) bool { return num(m, "deleted_count") == 5 })
	if d := m["deleted"].([]any); len(d) != 5 || d[0] != name(0) {
		t.Fatalf("deleted = %v", d)
	}
	m = waitSys(t, g, "$sys.groups", func(m map[string]any) bool { return num(m, "count") == 3 })
	if top := m["top"].([]any); len(top) != 3 {
		t.Fatalf("groups top = %v", top)
	}
}
