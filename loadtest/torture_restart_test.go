package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// restartRig starts the torture run's embedded gateway (stopped when t
// ends) with topic made of parts partitions, skipped with -short; its
// context ends with the test or after a minute. The ack timeout is a
// minute, so that no lease times out before its ack in a slow test under
// -race.
func restartRig(t *testing.T, topic string, parts int) (*torture, context.Context) {
	t.Helper()
	if testing.Short() {
		t.Skip("starts an embedded NATS server twice")
	}
	gw, err := startTortureGateway(&tortureConfig{engine: "embedded", keepalive: time.Second, ackTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := gw.stop(); err != nil {
			t.Error(err)
		}
		http.DefaultClient.CloseIdleConnections()
	})
	tr := &torture{gw: gw}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	if err := tr.createTopic(ctx, &tortureTopic{name: topic, parts: parts}, ""); err != nil {
		t.Fatal(err)
	}
	return tr, ctx
}

// pulled is a record of a pull member's poll.
type pulled struct {
	Offset  int64 `json:"offset"`
	Attempt int   `json:"attempt"`
}

// pollGroup polls group for pattern's records from the earliest on.
func pollGroup(t *testing.T, ctx context.Context, tr *torture, group, pattern string) []pulled {
	t.Helper()
	body, status, err := tr.do(ctx, http.MethodPost, "/v1/groups/"+group+"/poll",
		[]byte(`{"pattern":"`+pattern+`","max":20,"wait_ms":300,"from":"earliest"}`))
	if err != nil || status != http.StatusOK {
		t.Fatalf("poll: %d %v %s", status, err, body)
	}
	var page struct{ Records []pulled }
	if err := json.Unmarshal(body, &page); err != nil {
		t.Fatal(err)
	}
	return page.Records
}

// ackPulled acks r of topic's partition 0 for group and reports whether
// the gateway confirmed it.
func ackPulled(ctx context.Context, tr *torture, group, topic string, r pulled) bool {
	ack := fmt.Sprintf(`{"topic":%q,"partition":0,"offset":%d,"attempt":%d}`, topic, r.Offset, r.Attempt)
	_, st, err := tr.do(ctx, http.MethodPost, "/v1/groups/"+group+"/ack", []byte(ack))
	return err == nil && st == http.StatusOK
}

// TestTortureRestartKeepsLog: a graceful restart of the torture run's
// embedded gateway keeps its log, its epoch and its offsets, so that
// clients resume where they were.
func TestTortureRestartKeepsLog(t *testing.T) {
	tr, ctx := restartRig(t, "rs.0", 1)
	gw := tr.gw
	publish := func(i int) string {
		t.Helper()
		body, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rs.0","data":%d}`, i)))
		if err != nil || status != http.StatusOK {
			t.Fatalf("publish %d: status %d: %v %s", i, status, err, body)
		}
		return string(body)
	}
	epoch := func() string {
		t.Helper()
		body, status, err := tr.do(ctx, http.MethodGet, "/v1/topics/rs.0", nil)
		if err != nil || status != http.StatusOK {
			t.Fatalf("topic: status %d: %v", status, err)
		}
		return string(body)
	}
	for i := range 5 {
		publish(i)
	}
	before := epoch()
	if _, err := gw.restart(0); err != nil {
		t.Fatal(err)
	}
	after := epoch()
	got := publish(5)
	t.Logf("before: %s\nafter: %s\npublish after restart: %s", before, after, got)
	if off, _ := intAfter([]byte(got), keyOffset); off != 5 {
		t.Errorf("the first publish after the restart got offset %d, want 5: the log was not kept", off)
	}
}

// TestTortureRestartUnderLoadKeepsLog: a graceful restart of the embedded
// gateway while publishes are in flight keeps every acknowledged record:
// after it, each partition's next offset is past every offset a publish
// was acknowledged with.
func TestTortureRestartUnderLoadKeepsLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an embedded NATS server twice")
	}
	cfg := &tortureConfig{engine: "embedded", keepalive: time.Second}
	gw, err := startTortureGateway(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := gw.stop(); err != nil {
			t.Error(err)
		}
		http.DefaultClient.CloseIdleConnections()
	}()
	tr := &torture{gw: gw}
	ctx := context.Background()
	const parts = 2
	if err := tr.createTopic(ctx, &tortureTopic{name: "rs.1", parts: parts}, ""); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	acked := make([]int64, parts)
	for i := range acked {
		acked[i] = -1
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				body, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rs.1","key":"k%d-%d","data":1}`, w, i)))
				if err != nil || status != http.StatusOK {
					continue
				}
				part, _ := intAfter(body, keyPartition)
				off, _ := intAfter(body, keyOffset)
				mu.Lock()
				acked[part] = max(acked[part], off)
				mu.Unlock()
			}
		}()
	}
	pause(ctx, time.Second)
	if _, err := gw.restart(0); err != nil {
		t.Fatal(err)
	}
	pause(ctx, 300*time.Millisecond)
	close(stop)
	wg.Wait()
	body, status, err := tr.do(ctx, http.MethodGet, "/v1/topics/rs.1", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("topic: status %d: %v", status, err)
	}
	var info struct {
		Offsets []struct {
			Partition int   `json:"partition"`
			Next      int64 `json:"next"`
		} `json:"offsets"`
	}
	if err := json.Unmarshal(body, &info); err != nil {
		t.Fatal(err)
	}
	t.Logf("acknowledged up to %v; %s", acked, body)
	for _, o := range info.Offsets {
		if o.Next <= acked[o.Partition] {
			t.Errorf("partition %d: next offset %d, but offset %d was acknowledged", o.Partition, o.Next, acked[o.Partition])
		}
	}
}

// sseEvents reads n SSE events (event, id, data) of a stream.
func sseEvents(t *testing.T, url string, n int) [][3]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var out [][3]string
	var cur [3]string
	for len(out) < n && sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur != ([3]string{}) {
				out = append(out, cur)
			}
			cur = [3]string{}
		case strings.HasPrefix(line, "event: "):
			cur[0] = line[7:]
		case strings.HasPrefix(line, "id: "):
			cur[1] = line[4:]
		case strings.HasPrefix(line, "data: "):
			cur[2] = line[6:]
		}
	}
	return out
}

// TestTortureRestartSSEResume pins what the run's books expect of an SSE
// stream resumed with its last event's id after a graceful restart: the
// new gateway process does not know the id, so the stream says
// "recovered": false and starts again from the earliest records
// (router/sse_resume.go).
func TestTortureRestartSSEResume(t *testing.T) {
	tr, ctx := restartRig(t, "rs.2", 1)
	gw := tr.gw
	for i := range 10 {
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rs.2","data":%d}`, i))); err != nil || status != http.StatusOK {
			t.Fatalf("publish: %d %v", status, err)
		}
	}
	base := gw.nodes[0].httpURL + "/v1/sse?pattern=rs.2&from=earliest"
	evs := sseEvents(t, base, 5)
	t.Logf("first stream: %q", evs)
	last := ""
	for _, e := range evs {
		if e[0] == "" && e[1] != "" {
			last = e[1]
		}
	}
	if _, err := gw.restart(0); err != nil {
		t.Fatal(err)
	}
	evs = sseEvents(t, gw.nodes[0].httpURL+"/v1/sse?pattern=rs.2&last_event_id="+url.QueryEscape(last), 3)
	if len(evs) < 3 || !strings.Contains(evs[1][2], `"recovered":false`) || !strings.Contains(evs[2][2], `"offset":0,`) {
		t.Fatalf("resumed with %q after a restart: %q; want subscribed with \"recovered\": false, then offset 0", last, evs)
	}
}

// TestTortureRestartKeepsGroupAcks: a group member acks records and gets
// each ack confirmed ("acked"); the embedded gateway then restarts
// gracefully and the member joins again. No record whose ack was
// confirmed may be delivered again: a marker published after the rejoin
// is the barrier, every record delivered before it must be new.
func TestTortureRestartKeepsGroupAcks(t *testing.T) {
	tr, ctx := restartRig(t, "rg.0", 1)
	gw := tr.gw
	const n = 50
	publish := func(data string) {
		t.Helper()
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(`{"topic":"rg.0","data":"`+data+`"}`)); err != nil || status != http.StatusOK {
			t.Fatalf("publish: %d %v", status, err)
		}
	}
	// join subscribes a member and returns its frames.
	join := func() (*websocket.Conn, <-chan []byte) {
		t.Helper()
		conn, _, err := dialGateway(ctx, gw.nodes[0].wsURL, false)
		if err != nil {
			t.Fatal(err)
		}
		frames := make(chan []byte, 4*n)
		go func() { // exits when the connection ends
			defer close(frames)
			_ = readFrames(ctx, conn, func(l []byte) bool { frames <- append([]byte(nil), l...); return true })
		}()
		if err := conn.Write(ctx, websocket.MessageText, []byte(`{"op":"subscribe","id":"j","pattern":"rg.0","group":"rgrp","from":"earliest"}`)); err != nil {
			t.Fatal(err)
		}
		return conn, frames
	}
	conn, frames := join()
	for i := range n {
		publish(fmt.Sprint(i))
	}
	// Ack every delivery; once half the acks are confirmed, restart the
	// gateway while the member goes on acking, until its connection ends.
	acked := map[int64]bool{}
	restarted := make(chan error, 1)
	for l := range frames {
		switch {
		case isOp(l, opMessage):
			off, _ := intAfter(l, keyOffset)
			ack := fmt.Sprintf(`{"op":"ack","id":"a%d","group":"rgrp","topic":"rg.0","partition":0,"offset":%d}`, off, off)
			_ = conn.Write(ctx, websocket.MessageText, []byte(ack))
		case isOp(l, opAcked):
			id := stringAfter(l, []byte(`"id":"a`))
			off, _ := strconv.ParseInt(id, 10, 64)
			acked[off] = true
			if len(acked) == n/2 {
				go func() { _, err := gw.restart(0); restarted <- err }()
			}
		}
	}
	conn.CloseNow()
	t.Logf("%d acks confirmed before the connection ended (%v)", len(acked), ctx.Err())
	if err := <-restarted; err != nil {
		t.Fatal(err)
	}
	t.Logf("restarted (%v)", ctx.Err())
	conn, frames = join()
	defer conn.CloseNow()
	for l := range frames {
		if isOp(l, opSubscribed) {
			break
		}
	}
	publish("marker")
	markerSent := time.Now()
	var again, other []int64
	marker := false
	for l := range frames {
		if !isOp(l, opMessage) {
			continue
		}
		if bytes.Contains(l, []byte(`"marker"`)) {
			marker = true
			break
		}
		off, _ := intAfter(l, keyOffset)
		if !acked[off] {
			other = append(other, off)
		}
		ack := fmt.Sprintf(`{"op":"ack","group":"rgrp","topic":"rg.0","partition":0,"offset":%d}`, off)
		_ = conn.Write(ctx, websocket.MessageText, []byte(ack))
		if acked[off] {
			again = append(again, off)
		}
	}
	t.Logf("marker delivered: %v, %v after its publish; unacked records redelivered before it: %v", marker, time.Since(markerSent), other)
	if !marker {
		t.Errorf("the marker was not delivered within the test's time: %v", ctx.Err())
	}
	if len(again) > 0 {
		t.Errorf("after a graceful restart, %d records whose acks were confirmed were delivered again: offsets %v", len(again), again)
	}
}

// TestTortureRestartKeepsPulledAcks: records polled and acked over HTTP
// (200 OK) right before a graceful restart are not delivered again after
// it.
func TestTortureRestartKeepsPulledAcks(t *testing.T) {
	tr, ctx := restartRig(t, "rp.0", 1)
	gw := tr.gw
	const n = 40
	for i := range n {
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rp.0","data":%d}`, i))); err != nil || status != http.StatusOK {
			t.Fatalf("publish: %d %v", status, err)
		}
	}
	poll := func() []pulled { t.Helper(); return pollGroup(t, ctx, tr, "rpgrp", "rp.0") }
	acked := map[int64]bool{}
	// The ack timeout is a minute, so that no lease times out before its
	// ack (a slow test under -race); a record polled twice anyway is left
	// out of the check.
	polled := map[int64]int{}
	for len(acked) < n && ctx.Err() == nil {
		for _, r := range poll() {
			polled[r.Offset]++
			if ackPulled(ctx, tr, "rpgrp", "rp.0", r) {
				acked[r.Offset] = true
			}
		}
	}
	if _, err := gw.restart(0); err != nil {
		t.Fatal(err)
	}
	if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(`{"topic":"rp.0","data":"marker"}`)); err != nil || status != http.StatusOK {
		t.Fatalf("publish: %d %v", status, err)
	}
	var again []pulled
	for marker := false; !marker && ctx.Err() == nil; {
		for _, r := range poll() {
			if r.Offset == n {
				marker = true
			} else if acked[r.Offset] && polled[r.Offset] == 1 {
				again = append(again, r)
			}
		}
	}
	if len(again) > 0 {
		t.Errorf("after a graceful restart, %d records acked with 200 OK were delivered again: %v", len(again), again)
	}
}

// TestTortureRestartKeepsGroupAcksTwoMembers is
// TestTortureRestartKeepsGroupAcks with two members on four partitions,
// as the torture run's group has them.
func TestTortureRestartKeepsGroupAcksTwoMembers(t *testing.T) {
	tr, ctx := restartRig(t, "rg.1", 4)
	gw := tr.gw
	const n, markers = 400, 40
	mctx, mcancel := context.WithCancel(ctx) // ends the members once every marker arrived
	defer mcancel()
	var mu sync.Mutex // guards acked, again, markersSeen
	acked := map[[2]int64]bool{}
	var again [][2]int64
	markersSeen, restarted := 0, false
	member := func(wg *sync.WaitGroup) {
		defer wg.Done()
		conn, _, err := dialGateway(mctx, gw.nodes[0].wsURL, false)
		if err != nil {
			return
		}
		defer conn.CloseNow()
		_ = conn.Write(mctx, websocket.MessageText, []byte(`{"op":"subscribe","id":"j","pattern":"rg.1","group":"rg1","from":"earliest","max_in_flight":8}`))
		_ = readFrames(mctx, conn, func(l []byte) bool {
			switch {
			case isOp(l, opMessage):
				part, _ := intAfter(l, keyPartition)
				off, _ := intAfter(l, keyOffset)
				k := [2]int64{part, off}
				mu.Lock()
				if bytes.Contains(l, []byte(`"marker"`)) {
					markersSeen++
				} else if restarted && acked[k] {
					again = append(again, k)
				}
				if markersSeen == markers {
					mcancel()
				}
				mu.Unlock()
				ack := fmt.Sprintf(`{"op":"ack","id":"a%d.%d","group":"rg1","topic":"rg.1","partition":%d,"offset":%d}`, part, off, part, off)
				_ = conn.Write(mctx, websocket.MessageText, []byte(ack))
			case isOp(l, opAcked):
				id := stringAfter(l, []byte(`"id":"a`))
				ps, os, _ := strings.Cut(id, ".")
				part, _ := strconv.ParseInt(ps, 10, 64)
				off, _ := strconv.ParseInt(os, 10, 64)
				mu.Lock()
				acked[[2]int64{part, off}] = true
				mu.Unlock()
			}
			return true
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go member(&wg)
	go member(&wg)
	for i := range n {
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rg.1","key":"k%d","data":%d}`, i, i))); err != nil || status != http.StatusOK {
			t.Fatalf("publish: %d %v", status, err)
		}
		if i == n/2 {
			if _, err := gw.restart(0); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			restarted = true
			mu.Unlock()
			wg.Wait()
			wg.Add(2)
			go member(&wg)
			go member(&wg)
		}
	}
	for i := range markers {
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rg.1","key":"m%d","data":"marker"}`, i))); err != nil || status != http.StatusOK {
			t.Fatalf("publish: %d %v", status, err)
		}
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d acks confirmed, %d markers seen", len(acked), markersSeen)
	if markersSeen < markers {
		t.Errorf("%d of %d markers delivered within the test's time", markersSeen, markers)
	}
	if len(again) > 0 {
		t.Errorf("after a graceful restart, %d records whose acks were confirmed were delivered again (partition, offset): %v", len(again), again)
	}
}

// TestTortureRestartKeepsAcksAboveAHole: a pull member acks every record
// but the first (its lease still running, as a stalled member's is); the
// embedded gateway then restarts gracefully. The records acked above the
// unacked one must not be delivered again: only the first may be
// (jsengine's Close writes them with the partition's position, see
// engine/jsengine/settled.go).
func TestTortureRestartKeepsAcksAboveAHole(t *testing.T) {
	tr, ctx := restartRig(t, "rh.0", 1)
	gw := tr.gw
	const n = 10
	for i := range n {
		if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(fmt.Sprintf(`{"topic":"rh.0","data":%d}`, i))); err != nil || status != http.StatusOK {
			t.Fatalf("publish: %d %v", status, err)
		}
	}
	poll := func() []pulled { t.Helper(); return pollGroup(t, ctx, tr, "rhgrp", "rh.0") }
	acked := map[int64]bool{}
	for seen := 0; seen < n && ctx.Err() == nil; {
		for _, r := range poll() {
			seen++
			if r.Offset == 0 {
				continue // the hole: leased, not acked
			}
			if !ackPulled(ctx, tr, "rhgrp", "rh.0", r) {
				t.Fatalf("ack %d refused", r.Offset)
			}
			acked[r.Offset] = true
		}
	}
	if _, err := gw.restart(0); err != nil {
		t.Fatal(err)
	}
	if _, status, err := tr.do(ctx, http.MethodPost, "/v1/publish", []byte(`{"topic":"rh.0","data":"marker"}`)); err != nil || status != http.StatusOK {
		t.Fatalf("publish: %d %v", status, err)
	}
	var again []pulled
	for marker := false; !marker && ctx.Err() == nil; {
		for _, r := range poll() {
			ackPulled(ctx, tr, "rhgrp", "rh.0", r)
			if r.Offset == n {
				marker = true
			} else if acked[r.Offset] {
				again = append(again, r)
			}
		}
	}
	if len(again) > 0 {
		t.Errorf("after a graceful restart, %d records acked with 200 OK above an unacked one were delivered again: %v", len(again), again)
	}
}
