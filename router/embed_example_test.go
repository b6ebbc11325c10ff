package router_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// Example_embedded runs Switchyard inside a Go program: the Router is an
// http.Handler for remote clients, and the program itself publishes and
// subscribes in-process, without a socket.
func Example_embedded() {
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1})
	if err != nil {
		panic(err)
	}
	// http.ListenAndServe(":8080", rt) would serve WebSocket clients too.

	// A synchronous subscriber runs inline; a failing one harms nobody else.
	_, _ = rt.Subscribe("orders.*", router.LocalOptions{Mode: router.Sync}, func(r *engine.Record) error {
		fmt.Printf("sync  %s #%d %s\n", r.Topic, r.Offset, r.Data)
		return nil
	})
	broken, _ := rt.Subscribe("orders.#", router.LocalOptions{}, func(*engine.Record) error {
		return errors.New("always fails")
	})
	// An asynchronous subscriber has its own bounded queue and worker.
	var wg sync.WaitGroup
	wg.Add(2)
	async, _ := rt.Subscribe("orders.#", router.LocalOptions{Mode: router.Async, Queue: 100}, func(r *engine.Record) error {
		defer wg.Done()
		return nil
	})

	ctx := context.Background()
	for _, topic := range []string{"orders.created", "orders.paid"} {
		if _, err := rt.Publish(ctx, engine.Message{Topic: topic, Data: []byte(`{"id":7}`)}); err != nil {
			panic(err)
		}
	}
	wg.Wait()
	// Unsubscribe waits for the worker, so its counters are final.
	async.Unsubscribe()
	fmt.Println("async delivered", async.Stats().Delivered)
	fmt.Println("broken failed", broken.Stats().Failed)

	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_ = rt.Shutdown(sctx)
	_ = eng.Close(sctx)
	// Output:
	// sync  orders.created #0 {"id":7}
	// sync  orders.paid #0 {"id":7}
	// async delivered 2
	// broken failed 2
}
