package memengine_test

import (
	"context"
	"fmt"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

// printer is a group member that hands deliveries to its own goroutine
// (here, a buffered channel), as Consumers must.
type printer chan engine.Delivery

func (p printer) Deliver(d engine.Delivery)               { p <- d }
func (printer) Skipped(string, string, int, int64, int64) {}

func Example() {
	ctx := context.Background()
	e := memengine.New(memengine.Options{})
	defer e.Close(ctx)

	a, _ := e.Append(ctx, engine.Message{Topic: "orders.created", Key: "user-1", Data: []byte(`{"id":1}`)})
	fmt.Println("appended at offset", a.Offset)

	deliveries := make(printer, 16)
	if _, err := e.Join(ctx, engine.JoinRequest{Group: "billing", Pattern: "orders.#"}, deliveries); err != nil {
		fmt.Println(err)
		return
	}
	d := <-deliveries
	fmt.Printf("%s got %s@%d attempt %d: %s\n", d.Group, d.Record.Topic, d.Record.Offset, d.Attempt, d.Record.Data)
	_ = e.Ack(ctx, d.Group, "", engine.Position{Topic: d.Record.Topic, Partition: d.Record.Partition, Offset: d.Record.Offset})

	g, _ := e.Group(ctx, "billing")
	fmt.Println("committed", g.Partitions[0].Committed, "lag", g.Partitions[0].Lag)
	// Output:
	// appended at offset 0
	// billing got orders.created@0 attempt 1: {"id":1}
	// committed 1 lag 0
}
