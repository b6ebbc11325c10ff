package faults

import (
	"os"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"time"
)

// at builds operations with chosen times.
func (h *History) op(client int, in, out any, call, ret int64) {
	h.add(opOf(client, in, out, call, ret))
}

func checkHistory(t *testing.T, h *History) error {
	t.Helper()
	return h.Check(t.TempDir(), t.Name(), 10*time.Second)
}

func TestHistoryGood(t *testing.T) {
	h := NewHistory()
	h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 0}, 0, 10)
	h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Offset: 1}, 5, 20)      // concurrent
	h.op(2, appendIn{Log: "a", Data: "z"}, appendOut{Unknown: true}, 6, inf) // maybe
	h.op(3, readIn{Log: "a", Offset: 1}, readOut{Data: []string{"y"}}, 21, 21)
	h.op(0, appendIn{Log: "b", Data: "q", MsgID: "m"}, appendOut{Offset: 0}, 0, 10)
	h.op(0, appendIn{Log: "b", Data: "q", MsgID: "m"}, appendOut{Offset: 0}, 11, 12) // retry
	h.op(1, appendIn{Log: "b", Data: "r"}, appendOut{Unknown: true}, 13, inf)
	h.op(3, readIn{Log: "a", All: true}, readOut{Data: []string{"x", "y", "z"}}, 30, 31)
	h.op(3, readIn{Log: "b", All: true}, readOut{Data: []string{"q"}}, 30, 31)
	if err := checkHistory(t, h); err != nil {
		t.Fatal(err)
	}
}

const inf = int64(^uint64(0) >> 1)

// Each kind of violation the model must catch; the failure names a saved
// visualization.
func TestHistoryViolations(t *testing.T) {
	for _, tt := range []struct {
		name string
		ops  func(h *History)
	}{
		{"offset reused", func(h *History) {
			h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 0}, 0, 10)
			h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Offset: 0}, 5, 20)
		}},
		{"reordered", func(h *History) {
			h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 1}, 0, 10)
			h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Offset: 0}, 11, 20)
		}},
		{"acknowledged record lost", func(h *History) {
			h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 0}, 0, 10)
			h.op(1, readIn{Log: "a", All: true}, readOut{Data: []string{}}, 11, 20)
		}},
		{"record never appended read", func(h *History) {
			h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 0}, 0, 10)
			h.op(1, readIn{Log: "a", Offset: 1}, readOut{Data: []string{"ghost"}}, 11, 11)
		}},
		{"unacknowledged record read before its publish", func(h *History) {
			h.op(1, readIn{Log: "a", Offset: 0}, readOut{Data: []string{"x"}}, 1, 1)
			h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Unknown: true}, 5, inf)
		}},
		{"msg_id stored twice", func(h *History) {
			h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Offset: 0}, 0, 10)
			h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Offset: 1}, 11, 20)
		}},
		{"msg_id retry read twice", func(h *History) {
			h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Unknown: true}, 0, inf)
			h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Offset: 0}, 11, 20)
			h.op(1, readIn{Log: "a", All: true}, readOut{Data: []string{"x", "x"}}, 30, 40)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistory()
			tt.ops(h)
			err := checkHistory(t, h)
			if err == nil {
				t.Fatal("accepted")
			}
			i := strings.Index(err.Error(), "visualization in ")
			if i < 0 {
				t.Fatalf("error names no file: %v", err)
			}
			path := err.Error()[i+len("visualization in "):]
			if st, serr := os.Stat(path); serr != nil || st.Size() == 0 {
				t.Fatalf("visualization %s: %v", path, serr)
			}
		})
	}
}

// The recording methods make the operations the model expects.
func TestHistoryRecording(t *testing.T) {
	h := NewHistory()
	h.Publish(0, "a", "x", "").Acked(0)
	p := h.Publish(1, "a", "y", "m")
	h.Delivered(2, "a", 0, "x")
	p.Failed()
	call := time.Now()
	h.ReadAll(2, "a", call, []string{"x", "y"})
	if err := checkHistory(t, h); err != nil {
		t.Fatal(err)
	}
	h.ReadAll(2, "a", time.Now(), []string{"x"}) // y seen, then lost
	if err := checkHistory(t, h); err == nil {
		t.Fatal("a lost record accepted")
	}
}

func opOf(client int, in, out any, call, ret int64) porcupine.Operation {
	return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
}

// An append of unknown outcome that no read saw is left out of the check;
// one that a read saw stays in, and a read of data nobody published still
// fails.
func TestHistoryPrune(t *testing.T) {
	h := NewHistory()
	h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Unknown: true}, 0, inf)
	h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Unknown: true}, 0, inf)
	h.op(2, readIn{Log: "a", All: true}, readOut{Data: []string{"y"}}, 10, 11)
	if n := len(prune(h.ops)); n != 2 {
		t.Fatalf("%d operations after pruning, want 2", n)
	}
	if err := checkHistory(t, h); err != nil {
		t.Fatal(err)
	}
	h.op(2, readIn{Log: "a", Offset: 0}, readOut{Data: []string{"x"}}, 12, 12) // x is kept now
	if n := len(prune(h.ops)); n != 4 {
		t.Fatalf("%d operations after pruning, want 4", n)
	}
	if err := checkHistory(t, h); err == nil {
		t.Fatal("x at offset 0, where y was read, accepted")
	}
}

// Attempts of one msg_id whose last was acknowledged become one append
// from the first attempt's call to the ack; a second copy of its record is
// still caught.
func TestHistoryMergeRetries(t *testing.T) {
	h := NewHistory()
	h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Unknown: true}, 0, inf)
	h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Unknown: true}, 2, inf)
	h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Offset: 0}, 4, 5)
	h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Offset: 1}, 6, 7)
	h.op(2, readIn{Log: "a", All: true}, readOut{Data: []string{"x", "y"}}, 10, 11)
	ops := prune(h.ops)
	if len(ops) != 3 || ops[0].Call != 0 || ops[0].Return != 5 {
		t.Fatalf("merged: %+v", ops)
	}
	if err := checkHistory(t, h); err != nil {
		t.Fatal(err)
	}
	h.op(2, readIn{Log: "a", All: true}, readOut{Data: []string{"x", "y", "x"}}, 12, 13)
	if err := checkHistory(t, h); err == nil {
		t.Fatal("a msg_id stored twice accepted")
	}
}

// The prechecks name what they find.
func TestPrecheck(t *testing.T) {
	h := NewHistory()
	h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 1}, 0, 1)
	h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Offset: 0}, 2, 3)
	h.op(2, readIn{Log: "a", All: true}, readOut{Data: []string{"y", "x"}}, 10, 11)
	found := precheck(h.ops)
	if len(found) != 1 || !strings.Contains(found[0], "x acknowledged at offset 1 before y was called") {
		t.Fatalf("%q", found)
	}
	err := checkHistory(t, h)
	if err == nil || !strings.Contains(err.Error(), "before y was called") {
		t.Fatalf("%v", err)
	}
}

// Attempts of one msg_id never acknowledged but stored become one
// open-ended append at the offset the final read shows.
func TestHistoryMergeUnacknowledged(t *testing.T) {
	h := NewHistory()
	h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Unknown: true}, 0, inf)
	h.op(0, appendIn{Log: "a", Data: "x", MsgID: "m"}, appendOut{Unknown: true}, 2, inf)
	h.op(1, appendIn{Log: "a", Data: "y"}, appendOut{Offset: 0}, 1, 3)
	h.op(2, readIn{Log: "a", All: true}, readOut{Data: []string{"y", "x"}}, 10, 11)
	ops := prune(h.ops)
	if len(ops) != 3 || ops[0].Output != (appendOut{Offset: 1}) || ops[0].Return != inf {
		t.Fatalf("merged: %+v", ops)
	}
	if err := checkHistory(t, h); err != nil {
		t.Fatal(err)
	}
	h.op(2, readIn{Log: "a", Offset: 0}, readOut{Data: []string{"x"}}, 12, 12)
	if err := checkHistory(t, h); err == nil {
		t.Fatal("x read at offset 0 accepted")
	}
}

// A record delivered after the final read, past its end, was appended
// since (publishes of unknown outcome can land after it): no finding. One
// delivered before the final read and missing from it, or a delivery of
// other data at an offset the final read holds, is a finding.
func TestPrecheckReadsAfterTheFinalRead(t *testing.T) {
	h := NewHistory()
	h.op(0, appendIn{Log: "a", Data: "x"}, appendOut{Offset: 0}, 0, 1)
	h.op(1, appendIn{Log: "a", Data: "y", MsgID: "y"}, appendOut{Unknown: true}, 2, inf)
	h.op(2, readIn{Log: "a", All: true}, readOut{Data: []string{"x"}}, 10, 11)
	h.op(3, readIn{Log: "a", Offset: 1}, readOut{Data: []string{"y"}}, 12, 12) // y landed after the read
	if found := precheck(h.ops); len(found) != 0 {
		t.Fatalf("%q", found)
	}
	if err := checkHistory(t, h); err != nil {
		t.Fatal(err)
	}
	h.op(3, readIn{Log: "a", Offset: 1}, readOut{Data: []string{"y"}}, 5, 5) // y seen, then not in the final read
	h.op(4, readIn{Log: "a", Offset: 0}, readOut{Data: []string{"z"}}, 13, 13)
	found := precheck(h.ops)
	if len(found) != 2 || !strings.Contains(found[0], "y read at offset 1 before the final read, which holds 1 records") ||
		!strings.Contains(found[1], "z read at offset 0, which holds x in the final read") {
		t.Fatalf("%q", found)
	}
}
