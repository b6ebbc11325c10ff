package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// postJSON posts body to path on n and decodes the answer into out (when
// not nil); it returns the status and the raw answer.
func postJSON(t *testing.T, n *node, path, body string, out any) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+n.addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

type pulledRecord struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	Attempt   int    `json:"attempt"`
}

type pulledGroup struct {
	Members []struct {
		ID         string `json:"id"`
		Partitions []struct {
			Partition int `json:"partition"`
		} `json:"partitions"`
	} `json:"members"`
	Partitions []struct {
		Partition int    `json:"partition"`
		Member    string `json:"member"`
		Committed int64  `json:"committed"`
		Next      int64  `json:"next"`
		InFlight  int    `json:"in_flight"`
	} `json:"partitions"`
	Lag int64 `json:"lag"`
}

func getGroup(t *testing.T, n *node, group string) pulledGroup {
	t.Helper()
	resp, err := http.Get("http://" + n.addr + "/v1/groups/" + group)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var g pulledGroup
	if resp.StatusCode == http.StatusOK {
		_ = json.NewDecoder(resp.Body).Decode(&g)
	}
	return g
}

// TestClusterPullAcksOnAnyNode runs a pull consumer behind a load balancer
// over three gateway nodes on one JetStream: it polls on every node (so
// every node has a pull member of the group) and acks or nacks every
// record on a different node than the one that served its poll. Every
// ack succeeds once, the nacked record comes back once, the committed
// offsets reach the end and nothing else is delivered again.
func TestClusterPullAcksOnAnyNode(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	args := []string{"--engine", "nats", "--nats-url", url, "--nats-prefix", prefix, "--ack-timeout", "20s"}
	nodes := []*node{startNode(t, args...), startNode(t, args...), startNode(t, args...)}
	const parts, records, group = 3, 30, "lb"
	// The JetStream engine's exact eviction count is exposed from start-up.
	if resp, err := http.Get("http://" + nodes[0].addr + "/metrics"); err != nil {
		t.Fatal(err)
	} else {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(b), "\nswitchyard_dead_letters_evicted_total 0\n") {
			t.Error("a fresh JetStream node does not expose switchyard_dead_letters_evicted_total 0")
		}
	}
	if st, body := postJSON(t, nodes[0], "/v1/topics", fmt.Sprintf(`{"name":"lbjobs","partitions":%d}`, parts), nil); st != http.StatusOK && st != http.StatusCreated {
		t.Fatalf("create topic: %d %s", st, body)
	}
	poll := func(i int, waitMS int) []pulledRecord {
		var out struct {
			Records []pulledRecord `json:"records"`
		}
		if st, body := postJSON(t, nodes[i], "/v1/groups/"+group+"/poll",
			fmt.Sprintf(`{"pattern":"lbjobs","max":10,"wait_ms":%d}`, waitMS), &out); st != http.StatusOK {
			t.Fatalf("poll on node %d: %d %s", i, st, body)
		}
		return out.Records
	}
	// Every node gets a pull member; wait until the three share the
	// partitions, so that each node serves polls.
	for i := range nodes {
		poll(i, 0)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		g := getGroup(t, nodes[0], group)
		owners := map[string]bool{}
		for _, p := range g.Partitions {
			if p.Member != "" {
				owners[p.Member] = true
			}
		}
		if len(g.Members) == len(nodes) && len(g.Partitions) == parts && len(owners) == len(nodes) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pull members did not share the partitions: %+v", g)
		}
		for i := range nodes {
			poll(i, 0) // keep every member polling
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range records {
		httpPublish(t, nodes[i%len(nodes)], fmt.Sprintf(`{"topic":"lbjobs","key":"k%d","data":%d}`, i, i))
	}

	type pos struct {
		partition int
		offset    int64
	}
	delivered := map[pos]int{}
	acked := map[pos]bool{}
	nacked := false
	var nackedPos pos
	pollsFrom := make([]int, len(nodes))
	deadline = time.Now().Add(30 * time.Second)
	for round := 0; len(acked) < records; round++ {
		if time.Now().After(deadline) {
			t.Fatalf("acked %d of %d records (deliveries %v)", len(acked), records, delivered)
		}
		i := round % len(nodes)
		for _, r := range poll(i, 100) {
			p := pos{r.Partition, r.Offset}
			delivered[p]++
			pollsFrom[i]++
			other := nodes[(i+1+round/len(nodes)%2)%len(nodes)] // never the polling node
			body := fmt.Sprintf(`{"topic":%q,"partition":%d,"offset":%d}`, r.Topic, r.Partition, r.Offset)
			if !nacked {
				nacked, nackedPos = true, p
				if st, ans := postJSON(t, other, "/v1/groups/"+group+"/nack", body, nil); st != http.StatusOK {
					t.Fatalf("nack of %v polled on node %d, sent to another node: %d %s", p, i, st, ans)
				}
				continue
			}
			if st, ans := postJSON(t, other, "/v1/groups/"+group+"/ack", body, nil); st != http.StatusOK {
				t.Fatalf("ack of %v polled on node %d, sent to another node: %d %s", p, i, st, ans)
			}
			if acked[p] {
				t.Fatalf("record %v acked twice", p)
			}
			acked[p] = true
		}
	}
	for p, n := range delivered {
		want := 1
		if p == nackedPos {
			want = 2
		}
		if n != want {
			t.Errorf("record %v delivered %d times, want %d", p, n, want)
		}
	}
	for i, n := range pollsFrom {
		if n == 0 {
			t.Errorf("node %d served no record", i)
		}
	}
	// Committed reaches the end on every partition, and a last poll on
	// every node finds nothing to deliver again.
	deadline = time.Now().Add(10 * time.Second)
	for {
		g := getGroup(t, nodes[1], group)
		done := len(g.Partitions) == parts
		for _, p := range g.Partitions {
			done = done && p.Committed == p.Next && p.InFlight == 0
		}
		if done {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("committed did not reach the end: %+v", g)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range nodes {
		if again := poll(i, 300); len(again) != 0 {
			t.Errorf("node %d delivered %v again", i, again)
		}
	}
}
