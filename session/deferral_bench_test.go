package session

import (
	"fmt"
	"testing"
)

// BenchmarkFanOutDeferred measures a publisher's read fanned out through
// its Deferral: msgs messages to each of subs sessions (SendDeferred),
// then the Flush that wakes them. The writers are not started, so that
// the wakes cost what the Deferral adds and nothing of a writer's
// scheduling; each session's queue is drained after the flush. One op is
// one read.
func BenchmarkFanOutDeferred(b *testing.B) {
	for _, bc := range []struct{ subs, msgs int }{{1, 1}, {16, 1}, {16, 4}} {
		b.Run(fmt.Sprintf("subs=%d/msgs=%d", bc.subs, bc.msgs), func(b *testing.B) {
			subs := make([]*Session, bc.subs)
			for i := range subs {
				subs[i] = newSession("sub", Options{EncodeGap: testGap}, socket{})
			}
			items := benchItems(bc.msgs, 1)
			var d Deferral
			var buf []byte
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, s := range subs {
					for _, it := range items {
						it.Offset = int64(i)
						s.SendDeferred(it, &d)
					}
				}
				d.Flush()
				for _, s := range subs {
					buf, _ = s.q.AppendBatch(buf[:0], DefaultMaxBatchBytes)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N*bc.subs*bc.msgs)/b.Elapsed().Seconds(), "deliveries/s")
		})
	}
}
