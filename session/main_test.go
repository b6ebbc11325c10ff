package session

import (
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// Test frames are short readable strings rather than JSON: "m<sub>:<off>"
// for a message, "g<sub>:<from>-<to>" for a gap and "c:<text>" for a
// control frame.

func msg(sub uint64, off int64, prio uint8, pol Policy) Item {
	f := "m" + strconv.FormatUint(sub, 10) + ":" + strconv.FormatInt(off, 10)
	return Item{
		Frame:    []byte(f),
		Stream:   Stream{Sub: sub, Topic: "t", Partition: 0},
		Offset:   off,
		Priority: prio,
		Policy:   pol,
	}
}

func ctl(text string) Item { return Item{Frame: []byte("c:" + text)} }

func testGap(dst []byte, s Stream, from, to int64) []byte {
	dst = append(dst, 'g')
	dst = strconv.AppendUint(dst, s.Sub, 10)
	dst = append(dst, ':')
	dst = strconv.AppendInt(dst, from, 10)
	dst = append(dst, '-')
	return strconv.AppendInt(dst, to, 10)
}

// drain takes everything from q in batches of at most maxBytes and returns
// the frames in order.
func drain(q *Queue, maxBytes int) []string {
	var out []string
	var buf []byte
	for {
		var n int
		buf, n = q.AppendBatch(buf[:0], maxBytes)
		if n == 0 {
			return out
		}
		parts := strings.Split(string(buf), "\n")
		if len(parts) != n {
			panic("AppendBatch: frame count " + strconv.Itoa(n) + " for " + strconv.Itoa(len(parts)) + " frames")
		}
		out = append(out, parts...)
	}
}
