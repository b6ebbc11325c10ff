package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

func Example() {
	gw, err := startGateway(engine.GroupPolicy{}) // an in-process gateway
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close()
	ctx := context.Background()

	c, err := client.Dial(ctx, gw.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	got := make(chan *client.Message, 1)
	_, err = c.Subscribe(ctx, "orders.*", client.SubscribeOptions{}, func(m *client.Message) {
		got <- m
	})
	if err != nil {
		log.Fatal(err)
	}
	res, err := c.Publish(ctx, "orders.created", map[string]string{"sku": "A-1"}, client.WithKey("customer-42"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("published at partition %d offset %d\n", res.Partition, res.Offset)
	m := <-got
	fmt.Printf("%s got %s key=%s data=%s\n", m.Pattern, m.Topic, m.Key, m.Data)
	// Output:
	// published at partition 0 offset 0
	// orders.* got orders.created key=customer-42 data={"sku":"A-1"}
}

func ExampleClient_SubscribeChan() {
	gw, err := startGateway(engine.GroupPolicy{})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for i := range 3 {
		if _, err := c.Publish(ctx, "sensors.t1", i*10); err != nil {
			log.Fatal(err)
		}
	}
	// Replay what the log holds, then continue live.
	sub, err := c.SubscribeChan(ctx, "sensors.#", client.SubscribeOptions{From: client.Earliest()})
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		m := <-sub.C
		fmt.Println(m.Topic, m.Offset, string(m.Data))
	}
	// Output:
	// sensors.t1 0 0
	// sensors.t1 1 10
	// sensors.t1 2 20
}

func ExampleMessage_Ack() {
	gw, err := startGateway(engine.GroupPolicy{})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	done := make(chan struct{})
	// Members of one group share its records; each must be acked.
	_, err = c.Subscribe(ctx, "invoices", client.SubscribeOptions{Group: "billing"}, func(m *client.Message) {
		fmt.Printf("%s attempt %d: %s\n", m.Group, m.Attempt, m.Data)
		if err := m.Ack(ctx); err != nil {
			log.Print(err)
		}
		close(done)
	})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.Publish(ctx, "invoices", "INV-1"); err != nil {
		log.Fatal(err)
	}
	<-done
	// Output:
	// billing attempt 1: "INV-1"
}

func ExampleError() {
	gw, err := startGateway(engine.GroupPolicy{})
	if err != nil {
		log.Fatal(err)
	}
	defer gw.Close()
	ctx := context.Background()
	c, err := client.Dial(ctx, gw.URL, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	_, err = c.Publish(ctx, "orders..created", 1)
	var e *client.Error
	if errors.As(err, &e) {
		fmt.Println(e.Code)
	}
	// Output:
	// invalid_topic
}
