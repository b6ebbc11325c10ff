package jsengine_test

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// BenchmarkPipelinedReplicated appends 83-byte records with AppendAsync
// into one partition of a three-replica stream on three embedded servers,
// from one node or from two nodes (each on its own server) at once, with
// at most 256 appends outstanding per node (a gateway's four publishers
// with 64 each). It reports records/s over all nodes. "with msg_id": a
// new MsgID per record.
func BenchmarkPipelinedReplicated(b *testing.B) {
	for _, run := range []struct {
		name  string
		nodes int
		ids   bool
	}{{"one node", 1, false}, {"two nodes", 2, false}, {"one node with msg_id", 1, true}} {
		nodes := run.nodes
		b.Run(run.name, func(b *testing.B) {
			c := natstest.NewCluster(b, 3)
			var es []*jsengine.Engine
			for i := range nodes {
				e, err := openReplicas(c.URLs(i), "benchr3", 3)
				if err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _ = e.Close(b.Context()) })
				es = append(es, e)
			}
			const topic = "bench.r3"
			if _, err := es[0].CreateTopic(b.Context(), engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
				b.Fatal(err)
			}
			data := make([]byte, 83)
			b.ResetTimer()
			start := time.Now()
			var wg sync.WaitGroup
			for ni, e := range es {
				n := b.N / nodes
				if ni == 0 {
					n += b.N % nodes
				}
				wg.Add(1)
				go func() { // one producer per node; exits once its appends are answered
					defer wg.Done()
					sem := make(chan struct{}, 256)
					var all sync.WaitGroup
					for i := range n {
						sem <- struct{}{}
						all.Add(1)
						m := engine.Message{Topic: topic, Data: data}
						if run.ids {
							m.MsgID = "n" + strconv.Itoa(ni) + "-" + strconv.Itoa(i)
						}
						e.AppendAsync(b.Context(), m, func(_ engine.Appended, err error) {
							if err != nil {
								b.Error(err)
							}
							<-sem
							all.Done()
						})
					}
					all.Wait()
				}()
			}
			wg.Wait()
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "records/s")
		})
	}
}
