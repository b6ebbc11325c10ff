package session

import (
	"strconv"
	"strings"
	"testing"
)

// TestQueueFramePrefix: AppendBatch puts FramePrefix's line before every
// stream item's frame and before no control or gap frame; an item that
// does not fit leaves no prefix behind and goes first into the next batch
// with its prefix; AppendFrames ignores the prefix.
func TestQueueFramePrefix(t *testing.T) {
	prefix := func(dst []byte, it *Item) []byte {
		return strconv.AppendInt(append(dst, '>'), it.Offset, 10)
	}
	q := NewQueue(Options{EncodeGap: testGap, FramePrefix: prefix, QueueMessages: 2})
	q.Push(ctl("welcome"))
	q.Push(msg(1, 0, 0, DropOld))
	q.Push(msg(1, 1, 0, DropOld))
	q.Push(msg(1, 2, 0, DropOld)) // evicts offset 0: a gap
	// Room for the welcome, the gap and one prefixed frame, not two.
	max := len("c:welcome\ng1:0-1\n>1\nm1:1") + 3
	b, n := q.AppendBatch(nil, max)
	if got, want := string(b), "c:welcome\ng1:0-1\n>1\nm1:1"; got != want || n != 3 {
		t.Fatalf("first batch %q (%d frames), want %q (3)", got, n, want)
	}
	b, n = q.AppendBatch(nil, max)
	if got, want := string(b), ">2\nm1:2"; got != want || n != 1 {
		t.Fatalf("second batch %q (%d frames), want %q (1)", got, n, want)
	}

	q.Push(msg(1, 3, 0, DropOld))
	vec, _, n, _ := q.AppendFrames(nil, nil, 1<<20)
	var sb strings.Builder
	for _, p := range vec {
		sb.Write(p)
	}
	if got := sb.String(); got != "m1:3" || n != 1 {
		t.Fatalf("AppendFrames %q (%d frames), want %q", got, n, "m1:3")
	}
}
