package main

// The loadtest's consumer-group workload (--groups): members that ack,
// nack a share of first attempts or stall, acking one by one or a frame's
// worth per partition (--ack-batch).

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// memberLine handles one line of a group member: it acks, nacks a share
// of first attempts, or, while stalled, holds the record. With --ack-batch
// the acks wait for the end of the frame (flushAcks), which sends one ack
// per partition listing its offsets.
func (s *subscriber) memberLine(l []byte) bool {
	r := s.r
	switch {
	case isOp(l, opMessage):
		r.c.delivered.Add(1)
		attempt, _ := intAfter(l, keyAttempt)
		if attempt > 1 {
			r.c.redeliveries.Add(1)
		}
		if s.stalled.Load() {
			return true
		}
		p, _ := intAfter(l, keyPartition)
		off, _ := intAfter(l, keyOffset)
		op := "ack"
		if attempt <= 1 && r.cfg.nackShare > 0 && rand.Float64() < r.cfg.nackShare {
			op = "nack"
			r.c.nacks.Add(1)
		} else {
			r.c.acks.Add(1)
			if !s.tracker.add(int(p), off) {
				r.c.duplicates.Add(1)
			}
		}
		if op == "ack" && r.cfg.ackBatch {
			for len(s.pending) <= int(p) {
				s.pending = append(s.pending, nil)
			}
			s.pending[p] = append(s.pending[p], off)
			if t, ok := sendTime(l); ok && attempt <= 1 {
				s.pendSent = append(s.pendSent, t)
			}
			return true
		}
		s.ackBuf = s.appendSettle(s.ackBuf[:0], op, p)
		s.ackBuf = append(s.ackBuf, `,"offset":`...)
		s.ackBuf = strconv.AppendInt(s.ackBuf, off, 10)
		s.ackBuf = append(s.ackBuf, '}')
		err := s.writeAck()
		// Latency of a group is publish to ack written, first attempts only.
		if t, ok := sendTime(l); ok && err == nil && op == "ack" && attempt <= 1 {
			r.lat.record(s.idx, time.Duration(time.Now().UnixNano()-t))
		}
	default:
		return s.line(l)
	}
	return true
}

// flushAcks sends the acks memberLine collected from one frame: one ack
// frame per partition with "offsets".
func (s *subscriber) flushAcks() bool {
	var err error
	for p, offs := range s.pending {
		if len(offs) == 0 {
			continue
		}
		s.ackBuf = s.appendSettle(s.ackBuf[:0], "ack", int64(p))
		s.ackBuf = append(s.ackBuf, `,"offsets":[`...)
		for i, off := range offs {
			if i > 0 {
				s.ackBuf = append(s.ackBuf, ',')
			}
			s.ackBuf = strconv.AppendInt(s.ackBuf, off, 10)
		}
		s.ackBuf = append(s.ackBuf, "]}"...)
		s.pending[p] = offs[:0]
		if e := s.writeAck(); e != nil {
			err = e
		}
	}
	if err == nil && len(s.pendSent) > 0 {
		now := time.Now().UnixNano()
		for _, t := range s.pendSent {
			s.r.lat.record(s.idx, time.Duration(now-t))
		}
	}
	s.pendSent = s.pendSent[:0]
	return true // a broken connection ends the reader
}

// appendSettle appends an ack or nack of partition p, without its offset
// and closing brace.
func (s *subscriber) appendSettle(b []byte, op string, p int64) []byte {
	b = append(b, `{"op":"`...)
	b = append(b, op...)
	b = append(b, `","group":"`...)
	b = append(b, s.group...)
	b = append(b, `","topic":"`...)
	b = append(b, s.r.topics[0]...)
	b = append(b, `","partition":`...)
	return strconv.AppendInt(b, p, 10)
}

// writeAck writes ackBuf; a broken connection ends the reader.
func (s *subscriber) writeAck() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.conn.Write(ctx, websocket.MessageText, s.ackBuf)
}

// runGroups runs the group workload.
func (r *runner) runGroups(ctx context.Context) (*Report, error) {
	cfg := r.cfg
	r.setTopics("g", 1)
	parts := cfg.partitions
	if parts <= 0 {
		parts = cfg.members
	}
	if err := r.createTopic(ctx, r.topics[0], parts); err != nil {
		return nil, err
	}
	tracker := &offsetSet{}
	group := r.prefix + ".group"
	stall := int(math.Round(float64(cfg.members) * cfg.stallShare))
	members := make([]*subscriber, cfg.members)
	for i := range members {
		m := &subscriber{r: r, idx: i, pattern: r.topics[0], group: group, tracker: tracker}
		if cfg.ackBatch {
			m.frameEnd = m.flushAcks
		}
		m.stalled.Store(i < stall)
		members[i] = m
	}
	stopProgress := r.startProgress()
	defer stopProgress()
	members = r.dialAll(ctx, members, func(ctx context.Context, s *subscriber) error {
		return s.start(ctx, "", "", s.memberLine)
	})
	defer r.wg.Wait()
	defer r.closeAll(members)
	start := time.Now()
	pubs, err := r.publish(ctx, []int{0})
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	// Stalled members leave: the gateway hands their records to the rest.
	var stalled, working []*subscriber
	for _, m := range members {
		if m.stalled.Load() {
			stalled = append(stalled, m)
		} else {
			working = append(working, m)
		}
	}
	if len(working) > 0 {
		for _, m := range stalled {
			m.closing.Store(true)
			_ = m.conn.Close(websocket.StatusNormalClosure, "")
		}
	} else {
		for _, m := range stalled {
			m.stalled.Store(false) // nobody else can take over; resume acking
		}
	}
	sent := r.c.sent.Load()
	r.drain(ctx, func() bool { return tracker.len() >= sent })
	ackedIn := time.Since(start) // until the last record was acked (or the drain gave up)
	r.closeAll(members)
	r.closeAll(pubs)
	uniq := tracker.len()
	rep := &Report{
		Seconds: elapsed.Seconds(), Connections: int64(len(members) + len(pubs)),
		Sent: sent, Expected: sent, Delivered: uniq, Lost: max(0, sent-uniq),
		Duplicates: r.c.duplicates.Load(),
	}
	if s := ackedIn.Seconds(); s > 0 {
		rep.AckedPerS = float64(uniq) / s
	}
	if stall > 0 {
		rep.Notes = append(rep.Notes, fmt.Sprintf("%d stalled member(s) left when publishing stopped", len(stalled)))
	}
	rep.Notes = append(rep.Notes, "delivered counts distinct records acked; duplicates are records acked and then delivered (and acked) again",
		"latency: publish to ack written, first attempts; acked/s: distinct records acked over publishing plus drain")
	return rep, nil
}
