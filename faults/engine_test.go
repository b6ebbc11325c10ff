package faults

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// TestEngineAppendsDuringLeaderIsolation appends straight into the three
// gateways' engines (with and without a msg_id) while the NATS server
// leading the log is cut off, and checks what the gateway relies on to
// answer a publish: every append returns within PublishBound, and every
// failure wraps engine.ErrUnavailable (anything else reaches clients as
// `internal`). It lists each distinct error text it saw, and logs the
// slowest append. An append's several round trips used to add up past the
// bound (docs/faults.md, "Known defects" 2: 10.15 s seen); the engine now
// bounds the whole append (8 s).
func TestEngineAppendsDuringLeaderIsolation(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three NATS servers and three gateways")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := NewCluster(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const topic = "faults.engine"
	if _, err := c.Gateways()[0].Eng.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	other := map[string]int{}
	var slow []string
	acked, unavailable := 0, 0
	var slowest time.Duration
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i, gw := range c.Gateways() {
		for _, withID := range []bool{false, true} {
			wg.Add(1)
			go func() { // exits when stop is called
				defer wg.Done()
				for n := 0; lctx.Err() == nil; n++ {
					m := engine.Message{Topic: topic, Data: fmt.Appendf(nil, `"g%d-%v-%d"`, i, withID, n)}
					if withID {
						m.MsgID = fmt.Sprintf("g%d-%d", i, n)
					}
					start := time.Now()
					actx, acancel := context.WithTimeout(lctx, 2*PublishBound)
					_, err := gw.Eng.Append(actx, m)
					acancel()
					took := time.Since(start)
					mu.Lock()
					slowest = max(slowest, took)
					switch {
					case lctx.Err() != nil:
						if took > PublishBound {
							slow = append(slow, fmt.Sprintf("gateway %d msg_id %v: %v, cut short by the test's end (%v)", i, withID, took, err))
						}
					case err == nil:
						acked++
					case errors.Is(err, engine.ErrUnavailable):
						unavailable++
					default:
						other[fmt.Sprintf("msg_id %v: %v", withID, err)]++
					}
					if took > PublishBound && lctx.Err() == nil {
						slow = append(slow, fmt.Sprintf("gateway %d msg_id %v: %v (%v)", i, withID, took, err))
					}
					mu.Unlock()
					if err != nil {
						pause(lctx, retryPause)
					}
				}
			}()
		}
	}
	for ready := false; !ready; {
		if !pause(ctx, 50*time.Millisecond) {
			t.Fatal("no appends acked")
		}
		mu.Lock()
		ready = acked >= 20
		mu.Unlock()
	}
	heal, err := isolateLeader(ctx, c)
	if err != nil {
		stop()
		wg.Wait()
		t.Fatal(err)
	}
	pause(ctx, electionHold)
	herr := heal(ctx)
	pause(ctx, 2*time.Second)
	stop()
	wg.Wait()
	if herr != nil {
		t.Fatal(herr)
	}
	t.Logf("%d acked, %d unavailable, slowest append %v", acked, unavailable, slowest)
	var texts []string
	for s, n := range other {
		texts = append(texts, fmt.Sprintf("%d× %s", n, s))
	}
	sort.Strings(texts)
	for _, s := range texts {
		t.Errorf("failure not wrapping engine.ErrUnavailable: %s", s)
	}
	for _, s := range slow {
		t.Errorf("append answered after more than %v: %s", PublishBound, s)
	}
}
