package faults

// Histories: every publish and read a scenario makes, checked whole by
// porcupine against a model of an append-only log per partition.

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// appendIn is a publish: data (unique in the run) into a log (a topic's
// partition), with an optional msg_id.
type appendIn struct {
	Log   string
	Data  string
	MsgID string
}

// appendOut is a publish's answer: the offset it was given, or Unknown
// when it failed or got no answer (it may or may not be stored).
type appendOut struct {
	Offset  int64
	Unknown bool
}

// readIn is a read of a log: one record at Offset, or the whole log
// (All).
type readIn struct {
	Log    string
	Offset int64
	All    bool
}

// readOut is what a read saw: the record's data, or every record's.
type readOut struct {
	Data []string
}

// logState is a log as the model sees it: an immutable list of records,
// newest first, each node knowing the length and a hash of the list up
// to it.
type logState struct {
	prev  *logState
	data  string
	msgID string
	n     int64 // records, this one included; 0 for the empty log
	hash  uint64
}

var emptyLog = &logState{hash: 14695981039346656037}

func (s *logState) push(data, msgID string) *logState {
	h := s.hash
	for i := 0; i < len(data); i++ {
		h ^= uint64(data[i])
		h *= 1099511628211
	}
	h ^= 0xff
	h *= 1099511628211
	return &logState{prev: s, data: data, msgID: msgID, n: s.n + 1, hash: h}
}

// at returns the record at offset o (which must be < s.n).
func (s *logState) at(o int64) *logState {
	for s.n-1 > o {
		s = s.prev
	}
	return s
}

// findMsgID returns the offset of the record with msg_id id, or -1.
func (s *logState) findMsgID(id string) int64 {
	for ; s.n > 0; s = s.prev {
		if s.msgID == id {
			return s.n - 1
		}
	}
	return -1
}

func (s *logState) all() []string {
	out := make([]string, s.n)
	for ; s.n > 0; s = s.prev {
		out[s.n-1] = s.data
	}
	return out
}

func logEqual(a, b *logState) bool {
	if a.n != b.n || a.hash != b.hash {
		return false
	}
	for ; a != b && a.n > 0; a, b = a.prev, b.prev {
		if a.data != b.data || a.msgID != b.msgID {
			return false
		}
	}
	return true
}

// logModel is the model of one log: appends take the next offset (a
// repeated msg_id is answered with the first record's offset and stores
// nothing); an append with an unknown answer may or may not have taken
// effect; a read sees exactly the records appended before it.
var logModel = porcupine.NondeterministicModel{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byLog := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := opLog(op.Input)
			if _, ok := byLog[k]; !ok {
				keys = append(keys, k)
			}
			byLog[k] = append(byLog[k], op)
		}
		sort.Strings(keys)
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byLog[k])
		}
		return out
	},
	Init: func() []interface{} { return []interface{}{emptyLog} },
	Step: func(state, input, output interface{}) []interface{} {
		s := state.(*logState)
		switch in := input.(type) {
		case appendIn:
			out := output.(appendOut)
			if in.MsgID != "" {
				if o := s.findMsgID(in.MsgID); o >= 0 {
					if out.Unknown || out.Offset == o {
						return []interface{}{s}
					}
					return nil
				}
			}
			if out.Unknown {
				return []interface{}{s, s.push(in.Data, in.MsgID)}
			}
			if out.Offset != s.n {
				return nil
			}
			return []interface{}{s.push(in.Data, in.MsgID)}
		case readIn:
			out := output.(readOut)
			if in.All {
				if int64(len(out.Data)) != s.n {
					return nil
				}
				for i, r := s.n-1, s; i >= 0; i, r = i-1, r.prev {
					if out.Data[i] != r.data {
						return nil
					}
				}
				return []interface{}{s}
			}
			if in.Offset >= s.n || s.at(in.Offset).data != out.Data[0] {
				return nil
			}
			return []interface{}{s}
		}
		return nil
	},
	Equal: func(a, b interface{}) bool { return logEqual(a.(*logState), b.(*logState)) },
	Hash:  func(s interface{}) uint64 { return s.(*logState).hash },
	DescribeOperation: func(input, output interface{}) string {
		switch in := input.(type) {
		case appendIn:
			out := output.(appendOut)
			res := fmt.Sprint(out.Offset)
			if out.Unknown {
				res = "unknown"
			}
			if in.MsgID != "" {
				return fmt.Sprintf("append(%s, msg_id %s) -> %s", in.Data, in.MsgID, res)
			}
			return fmt.Sprintf("append(%s) -> %s", in.Data, res)
		case readIn:
			out := output.(readOut)
			if in.All {
				return fmt.Sprintf("read all -> %d records", len(out.Data))
			}
			return fmt.Sprintf("read(%d) -> %s", in.Offset, out.Data[0])
		}
		return "?"
	},
	DescribeState: func(state interface{}) string {
		s := state.(*logState)
		if s.n <= 8 {
			return "[" + strings.Join(s.all(), " ") + "]"
		}
		return fmt.Sprintf("[%d records ... %s]", s.n, s.data)
	},
}

func opLog(input interface{}) string {
	switch in := input.(type) {
	case appendIn:
		return in.Log
	case readIn:
		return in.Log
	}
	return ""
}

// History is a run's publishes and reads. Its methods are safe for
// concurrent use.
type History struct {
	start time.Time

	mu  sync.Mutex // guards ops
	ops []porcupine.Operation
}

// NewHistory starts an empty history; times count from now.
func NewHistory() *History { return &History{start: time.Now()} }

func (h *History) now() int64 { return int64(time.Since(h.start)) }

// Pending is a publish called and not yet answered.
type Pending struct {
	h      *History
	client int
	in     appendIn
	call   int64
}

// Publish records that client called a publish of data (unique in the
// run) into log (a topic's partition, named as the caller likes) with
// msgID ("" for none); the returned Pending takes its answer.
func (h *History) Publish(client int, log, data, msgID string) *Pending {
	return &Pending{h: h, client: client, in: appendIn{Log: log, Data: data, MsgID: msgID}, call: h.now()}
}

// Acked records that the publish was stored at offset.
func (p *Pending) Acked(offset int64) {
	p.h.add(porcupine.Operation{ClientId: p.client, Input: p.in, Call: p.call,
		Output: appendOut{Offset: offset}, Return: p.h.now()})
}

// Failed records that the publish failed or got no answer: it may have
// been stored or not, and may be stored at any time later, so it is
// open-ended.
func (p *Pending) Failed() {
	p.h.add(porcupine.Operation{ClientId: p.client, Input: p.in, Call: p.call,
		Output: appendOut{Unknown: true}, Return: math.MaxInt64})
}

// Delivered records that client was sent the record at offset of log,
// holding data: the record was in the log by then.
func (h *History) Delivered(client int, log string, offset int64, data string) {
	t := h.now()
	h.add(porcupine.Operation{ClientId: client, Input: readIn{Log: log, Offset: offset}, Call: t,
		Output: readOut{Data: []string{data}}, Return: t})
}

// ReadAll records a read of the whole of log, called at call, that saw
// data (in offset order, from offset 0).
func (h *History) ReadAll(client int, log string, call time.Time, data []string) {
	h.add(porcupine.Operation{ClientId: client, Input: readIn{Log: log, All: true},
		Call: int64(call.Sub(h.start)), Output: readOut{Data: data}, Return: h.now()})
}

func (h *History) add(op porcupine.Operation) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ops = append(h.ops, op)
}

// Len is the number of operations recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// readsPast counts the distinct offsets at or past n of log that reads
// saw.
func (h *History) readsPast(log string, n int64) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[int64]bool{}
	for _, op := range h.ops {
		if in, ok := op.Input.(readIn); ok && !in.All && in.Log == log && in.Offset >= n {
			seen[in.Offset] = true
		}
	}
	return len(seen)
}

// Check checks the whole history within timeout. It returns nil when the
// history is linearizable; otherwise an error that, when the history is
// not (or the check ran out of time), names the file in dir holding
// porcupine's visualization of it (open it in a browser).
func (h *History) Check(dir, name string, timeout time.Duration) error {
	h.mu.Lock()
	ops := prune(h.ops)
	h.mu.Unlock()
	model := logModel.ToModel()
	res, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
	if res == porcupine.Ok {
		return nil
	}
	verdict := "not linearizable"
	if res == porcupine.Unknown {
		verdict = fmt.Sprintf("not checked within %v", timeout)
	}
	if found := precheck(ops); len(found) > 0 {
		verdict += " (" + strings.Join(found, "; ") + ")"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("faults: history %s %s (%d operations); saving it: %w", name, verdict, len(ops), err)
	}
	path := filepath.Join(dir, fmt.Sprintf("history-%s-%d.html", sanitize(name), time.Now().UnixNano()))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return fmt.Errorf("faults: history %s %s (%d operations); saving it: %w", name, verdict, len(ops), err)
	}
	return fmt.Errorf("faults: history %s %s (%d operations checked): visualization in %s", name, verdict, len(ops), path)
}

// prune returns the operations the checker needs, with the same verdict
// and a far smaller search:
//
//   - The attempts of one msg_id on one log of which one was acknowledged
//     become one append, called at the first attempt's call and returning
//     at the first acknowledgement. The record can only have been stored
//     between those two times, and only once: an earlier attempt that
//     stored it stored the same record (the retry is answered with its
//     offset), and a second copy shows in the reads as a record no
//     append produced.
//   - The attempts of one msg_id none of which was acknowledged but whose
//     record the last whole read shows become one append, called at the
//     first attempt's call, open-ended, with the offset that read shows.
//   - An append of unknown outcome that no read saw is left out: the model
//     lets it be a no-op, and no verdict depends on it.
//
// Open-ended appends (unknown outcome) are what makes the search
// expensive; after this only those of the last moments of a run remain.
func prune(ops []porcupine.Operation) []porcupine.Operation {
	seen := map[string]bool{} // log + "\x00" + data
	for _, op := range ops {
		if in, ok := op.Input.(readIn); ok {
			for _, d := range op.Output.(readOut).Data {
				seen[in.Log+"\x00"+d] = true
			}
		}
	}
	// Per log and msg_id: the first call, and the first acknowledged
	// attempt's index.
	type attempts struct {
		first int64
		acked int // -1: none
	}
	byID := map[string]*attempts{}
	for i, op := range ops {
		in, ok := op.Input.(appendIn)
		if !ok || in.MsgID == "" {
			continue
		}
		k := in.Log + "\x00" + in.MsgID
		a := byID[k]
		if a == nil {
			a = &attempts{first: op.Call, acked: -1}
			byID[k] = a
		}
		a.first = min(a.first, op.Call)
		if !op.Output.(appendOut).Unknown && (a.acked < 0 || op.Return < ops[a.acked].Return) {
			a.acked = i
		}
	}
	// Where the last whole read of each log put each record.
	finalAt := map[string]int64{}
	finalOff := map[string]int64{} // log + "\x00" + data
	for _, op := range ops {
		if in, ok := op.Input.(readIn); ok && in.All && op.Call >= finalAt[in.Log] {
			finalAt[in.Log] = op.Call
			for o, d := range op.Output.(readOut).Data {
				finalOff[in.Log+"\x00"+d] = int64(o)
			}
		}
	}
	firstOf := map[string]int{} // per log and msg_id: its first attempt
	for i, op := range ops {
		if in, ok := op.Input.(appendIn); ok && in.MsgID != "" {
			k := in.Log + "\x00" + in.MsgID
			if j, ok := firstOf[k]; !ok || op.Call < ops[j].Call {
				firstOf[k] = i
			}
		}
	}
	out := make([]porcupine.Operation, 0, len(ops))
	for i, op := range ops {
		in, ok := op.Input.(appendIn)
		if !ok {
			out = append(out, op)
			continue
		}
		unknown := op.Output.(appendOut).Unknown
		if in.MsgID != "" {
			a := byID[in.Log+"\x00"+in.MsgID]
			if a.acked == i {
				op.Call = a.first
			} else if unknown && a.acked >= 0 {
				continue // covered by the acknowledged attempt
			} else if o, ok := finalOff[in.Log+"\x00"+in.Data]; ok && unknown {
				// Never acknowledged, but stored: by one of its attempts,
				// after the first was called, at the offset the final
				// read shows it (a second copy would show there too).
				if firstOf[in.Log+"\x00"+in.MsgID] != i {
					continue
				}
				op.Output = appendOut{Offset: o}
			}
		}
		if unknown && !seen[in.Log+"\x00"+in.Data] {
			continue
		}
		out = append(out, op)
	}
	return out
}

func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' {
			return r
		}
		return '_'
	}, s)
}
