package session

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func propFrame(s Stream, off int64) []byte {
	return fmt.Appendf(nil, "m%d.%d:%d", s.Sub, s.Partition, off)
}

func propGap(dst []byte, s Stream, from, to int64) []byte {
	return fmt.Appendf(dst, "g%d.%d:%d-%d", s.Sub, s.Partition, from, to)
}

// parseEvent reads a frame written by propFrame or propGap.
func parseEvent(f string) (kind byte, s Stream, from, to int64, err error) {
	kind = f[0]
	if kind == 'c' {
		return kind, s, 0, 0, nil
	}
	head, rest, ok := strings.Cut(f[1:], ":")
	sub, part, ok2 := strings.Cut(head, ".")
	if !ok || !ok2 {
		return 0, s, 0, 0, fmt.Errorf("bad frame %q", f)
	}
	s.Sub, _ = strconv.ParseUint(sub, 10, 64)
	s.Partition, _ = strconv.Atoi(part)
	s.Topic = "t"
	switch kind {
	case 'm':
		from, err = strconv.ParseInt(rest, 10, 64)
		return kind, s, from, from + 1, err
	case 'g':
		a, b, _ := strings.Cut(rest, "-")
		from, err = strconv.ParseInt(a, 10, 64)
		if err == nil {
			to, err = strconv.ParseInt(b, 10, 64)
		}
		return kind, s, from, to, err
	}
	return 0, s, 0, 0, fmt.Errorf("bad frame %q", f)
}

// TestQueueProperty sends random sequences with random policies, priorities
// and streams, drains at random points with random batch sizes, and checks
// per stream that delivered offsets increase, gaps come in offset order
// with the messages, and delivered ∪ gaps == accepted offsets, disjoint.
func TestQueueProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		limit := rapid.IntRange(1, 8).Draw(rt, "limit")
		var dropped []int64
		q := NewQueue(Options{
			QueueMessages: limit,
			EncodeGap:     propGap,
			OnDrop:        func(it *Item) { dropped = append(dropped, it.Offset) },
		})
		next := map[Stream]int64{}
		accepted := map[Stream]map[int64]bool{}
		reliable := map[Stream]map[int64]bool{}
		var controls []string
		var out []string

		take := func(maxBytes int, all bool) {
			var buf []byte
			for {
				var n int
				if rapid.Bool().Draw(rt, "pieces") {
					// AppendFrames: the pieces joined are the batch.
					var vec [][]byte
					var size int
					vec, _, n, size = q.AppendFrames(nil, nil, maxBytes)
					buf = bytes.Join(vec, nil)
					if len(buf) != size {
						rt.Fatalf("pieces of %d bytes, reported %d", len(buf), size)
					}
					for i, p := range vec {
						if sep := string(p) == "\n"; sep != (i%2 == 1) {
							rt.Fatalf("piece %d of %d is %q", i, len(vec), p)
						}
					}
				} else {
					buf, n = q.AppendBatch(buf[:0], maxBytes)
				}
				if n == 0 {
					return
				}
				if len(buf) > maxBytes && n > 1 {
					rt.Fatalf("batch of %d frames is %d bytes, over %d", n, len(buf), maxBytes)
				}
				out = append(out, strings.Split(string(buf), "\n")...)
				if !all {
					return
				}
			}
		}

		steps := rapid.IntRange(1, 300).Draw(rt, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 9).Draw(rt, "op") {
			case 0:
				take(rapid.IntRange(1, 64).Draw(rt, "max"), false)
				if rapid.Bool().Draw(rt, "shrink") {
					q.Shrink() // a no-op unless the batch emptied the queue
				}
			case 1:
				take(1<<20, true)
				q.Shrink() // as a writer that parks
			case 2:
				c := "c" + strconv.Itoa(i)
				if q.Push(Item{Frame: []byte(c)}) == Queued {
					controls = append(controls, c)
				}
			default:
				s := Stream{
					Sub:       uint64(rapid.IntRange(1, 3).Draw(rt, "sub")),
					Topic:     "t",
					Partition: rapid.IntRange(0, 1).Draw(rt, "part"),
				}
				off := next[s]
				next[s] = off + int64(rapid.IntRange(1, 2).Draw(rt, "skip"))
				it := Item{
					Frame:    propFrame(s, off),
					Stream:   s,
					Offset:   off,
					Priority: uint8(rapid.IntRange(0, 4).Draw(rt, "prio")),
					Policy:   Policy(rapid.IntRange(0, 3).Draw(rt, "policy")),
				}
				switch q.Push(it) {
				case Queued, Dropped:
					if accepted[s] == nil {
						accepted[s] = map[int64]bool{}
						reliable[s] = map[int64]bool{}
					}
					accepted[s][off] = true
					if it.Policy == Reliable {
						reliable[s][off] = true
					}
				}
			}
			checkInvariants(t, q)
		}
		q.Close()
		take(1<<20, true)
		if q.Len() != 0 || q.Pending() {
			rt.Fatalf("queue not empty after draining: %d", q.Len())
		}

		var gotControls []string
		covered := map[Stream]map[int64]bool{}
		end := map[Stream]int64{}
		gapOffsets := 0
		for _, f := range out {
			kind, s, from, to, err := parseEvent(f)
			if err != nil {
				rt.Fatal(err)
			}
			if kind == 'c' {
				gotControls = append(gotControls, f)
				continue
			}
			if e, ok := end[s]; ok && from < e {
				rt.Fatalf("stream %v: %s after events up to %d", s, f, e)
			}
			end[s] = to
			if covered[s] == nil {
				covered[s] = map[int64]bool{}
			}
			for o := from; o < to; o++ {
				if !accepted[s][o] {
					rt.Fatalf("stream %v: %s covers offset %d never accepted", s, f, o)
				}
				if covered[s][o] {
					rt.Fatalf("stream %v: offset %d delivered or reported twice", s, o)
				}
				covered[s][o] = true
				if kind == 'g' {
					gapOffsets++
					if reliable[s][o] {
						rt.Fatalf("stream %v: reliable offset %d reported as a gap", s, o)
					}
				}
			}
		}
		for s, offs := range accepted {
			for o := range offs {
				if !covered[s][o] {
					rt.Fatalf("stream %v: offset %d neither delivered nor reported", s, o)
				}
			}
		}
		if strings.Join(gotControls, ",") != strings.Join(controls, ",") {
			rt.Fatalf("control frames %v, want %v", gotControls, controls)
		}
		if gapOffsets != len(dropped) || q.Stats().Dropped != uint64(len(dropped)) {
			rt.Fatalf("gap offsets %d, OnDrop calls %d, Dropped %d", gapOffsets, len(dropped), q.Stats().Dropped)
		}
	})
}
