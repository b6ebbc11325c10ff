package router

// The held list and the replay budget of a persistent session
// (mqtt_session_replay.go), step by step: replayed deliveries are never
// dropped from the held list, live ones are, counted; the budget makes a
// catch-up wait until the writer gives back what it wrote.

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// resumeHoldSession is a persistent session (tracked) whose window of 1 is
// full, with a queue bound of 4, and a session core that never runs.
func resumeHoldSession(t *testing.T) *mqttSession {
	t.Helper()
	rt := &Router{mq: &mqttState{m: newMQTTMetrics(prometheus.NewRegistry())}, bm: &boundMetrics{}}
	for i := range rt.bm.drops {
		rt.bm.drops[i] = prometheus.NewCounter(prometheus.CounterOpts{Name: "drops"})
	}
	rt.opts.Session.QueueMessages = 4
	rt.mq.opts.MaxHeldBytes = 1 << 20
	s := fullWindowSession(rt)
	s.trk = &mqttTrack{next: map[trackKey]int64{}, sent: map[uint16]trackPos{}}
	s.cn.sess = session.NewOneWay("resume-hold", session.Options{EncodeGap: s.encodeGap}, session.Transport{
		Write:    s.write,
		Close:    func(websocket.StatusCode, string) error { return nil },
		CloseNow: func() error { return nil },
	})
	return s
}

// holdPayload holds a QoS 1 PUBLISH with payload p, replayed or live.
func holdPayload(t *testing.T, s *mqttSession, p string, replayed bool) {
	t.Helper()
	pkt, err := mqtt.EncodePublishFrame(packets.Packet{TopicName: "t", Payload: []byte(p),
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}, mqtt.Version5)
	if err != nil {
		t.Fatal(err)
	}
	_, idAt, _ := mqtt.Span(pkt)
	s.hold(pkt, idAt, trackPos{}, replayed)
}

// heldPayloads lists the payloads held, in order: each is the last two
// bytes of its packet.
func heldPayloads(s *mqttSession) []string {
	var out []string
	for _, h := range s.held {
		out = append(out, string(h.b[len(h.b)-2:]))
	}
	return out
}

// counterValue reads a counter.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// expectHeld checks the payloads held, in order, and the drops counted.
func expectHeld(t *testing.T, s *mqttSession, drops float64, want ...string) {
	t.Helper()
	got := heldPayloads(s)
	if len(got) != len(want) {
		t.Fatalf("held %q, want %q", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("held %q, want %q", got, want)
		}
	}
	if d := counterValue(t, s.rt.bm.drops[session.DropOld]); d != drops {
		t.Fatalf("held %q with %v drops counted, want %v", got, d, drops)
	}
}

// TestMQTTResumeHeldKeepsReplayed: the held list's bounds (4) are the
// live deliveries' alone: replayed ones are held past them (the replay
// budget keeps them to the same bounds) and never dropped, a replay going
// on never pushes a live one out, and past the bound the oldest live one
// goes, counted. Writing replayed ones gives their count and bytes back to
// the budget.
func TestMQTTResumeHeldKeepsReplayed(t *testing.T) {
	s := resumeHoldSession(t)
	holdPayload(t, s, "l0", false)
	holdPayload(t, s, "r1", true)
	holdPayload(t, s, "l2", false)
	holdPayload(t, s, "r3", true)
	expectHeld(t, s, 0, "l0", "r1", "l2", "r3")
	holdPayload(t, s, "r4", true) // past the bound in all: nothing goes
	expectHeld(t, s, 0, "l0", "r1", "l2", "r3", "r4")
	holdPayload(t, s, "l5", false) // 3 live: nothing goes
	holdPayload(t, s, "l6", false) // 4 live
	expectHeld(t, s, 0, "l0", "r1", "l2", "r3", "r4", "l5", "l6")
	holdPayload(t, s, "l7", false) // past the live bound: the oldest live one goes
	expectHeld(t, s, 1, "r1", "l2", "r3", "r4", "l5", "l6", "l7")
	if s.trk.heldReplayed != 3 || s.heldN.Load() != 7 {
		t.Fatalf("heldReplayed %d, heldN %d, want 3 and 7", s.trk.heldReplayed, s.heldN.Load())
	}
	if n := counterValue(t, s.rt.mq.m.skipped.WithLabelValues("window_full")); n != 1 {
		t.Fatalf(`skipped{why="window_full"} %v, want 1`, n)
	}

	// The window opens for two: r1 and l2 are written, r1 given back.
	r1 := len(s.held[0].b)
	s.trk.replay.add(3, s.trk.heldReplayedBytes)
	s.window = 3
	if out := s.releaseHeld(nil); len(out) == 0 {
		t.Fatal("nothing released with room in the window")
	}
	expectHeld(t, s, 1, "r3", "r4", "l5", "l6", "l7")
	if s.trk.written != (replayTally{1, r1}) {
		t.Fatalf("written %+v, want {1 %d}", s.trk.written, r1)
	}
	s.writeDone()
	if s.trk.replay.n != 2 || s.trk.replay.bytes != s.trk.heldReplayedBytes || s.trk.heldReplayed != 2 {
		t.Fatalf("budget %d deliveries, %d bytes; held %d replayed, %d bytes", s.trk.replay.n, s.trk.replay.bytes, s.trk.heldReplayed, s.trk.heldReplayedBytes)
	}
}

// TestMQTTResumeBudgetWaits: a catch-up waiting for room in a spent
// budget goes on once the writer gives back what it wrote, and stops with
// its context.
func TestMQTTResumeBudgetWaits(t *testing.T) {
	s := resumeHoldSession(t)
	s.trk.replay.add(4, 400) // the bound: 4 deliveries
	if s.takeLast(nil, 1) {
		t.Fatal("takeLast found room with the budget spent")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.waitReplayRoom(ctx, 2) }()
	select {
	case err := <-done:
		t.Fatalf("waitReplayRoom returned %v with the budget spent", err)
	default:
	}
	s.trk.replay.give(replayTally{1, 100}) // room for 1: still waiting
	if s.takeLast(nil, 2) {
		t.Fatal("takeLast found room for 2 with 1 given back")
	}
	select {
	case err := <-done:
		t.Fatalf("waitReplayRoom for 2 returned %v with room for 1", err)
	default:
	}
	s.trk.replay.give(replayTally{1, 100})
	if err := <-done; err != nil {
		t.Fatalf("waitReplayRoom: %v", err)
	}
	if !s.takeLast(nil, 2) || s.takeLast(nil, 3) {
		t.Fatal("takeLast: want room for 2 deliveries and not 3")
	}

	s.trk.replay.add(2, 200)
	stop, cancelStop := context.WithCancel(context.Background())
	go func() { done <- s.waitReplayRoom(stop, 1) }()
	cancelStop()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("waitReplayRoom after its context ended: %v", err)
	}
}
