package session_test

import (
	"fmt"
	"strconv"

	"github.com/switchyard/switchyard/session"
)

func ExampleQueue() {
	q := session.NewQueue(session.Options{
		QueueMessages: 2,
		EncodeGap: func(dst []byte, s session.Stream, from, to int64) []byte {
			dst = append(dst, `{"op":"gap","topic":"`...)
			dst = append(dst, s.Topic...)
			dst = append(dst, `","from":`...)
			dst = strconv.AppendInt(dst, from, 10)
			dst = append(dst, `,"to":`...)
			dst = strconv.AppendInt(dst, to, 10)
			return append(dst, '}')
		},
	})
	s := session.Stream{Sub: 1, Topic: "orders"}
	for off := int64(0); off < 3; off++ {
		frame := []byte(`{"op":"message","topic":"orders","offset":` + strconv.FormatInt(off, 10) + `}`)
		fmt.Println(q.Push(session.Item{Frame: frame, Stream: s, Offset: off, Policy: session.DropOld}))
	}
	q.Push(session.Item{Frame: []byte(`{"op":"subscribed","id":7}`)})
	batch, n := q.AppendBatch(nil, 64<<10)
	fmt.Printf("%d frames:\n%s\n", n, batch)
	// Output:
	// queued
	// queued
	// queued
	// 4 frames:
	// {"op":"subscribed","id":7}
	// {"op":"gap","topic":"orders","from":0,"to":1}
	// {"op":"message","topic":"orders","offset":1}
	// {"op":"message","topic":"orders","offset":2}
}
