package faults

// The scenarios.

import (
	"context"
	"fmt"
	"time"
)

// electionHold is how long a fault that takes a leader away is held: past
// NATS's election timeout (JetStream's Raft elects within a few seconds)
// and past two missed pings (the servers ping every second).
const electionHold = 8 * time.Second

// Scenarios is every scenario, in the order the long run runs them.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "isolate-nats-leader", Hold: electionHold, Inject: isolateLeader},
		{Name: "isolate-gateway", Hold: electionHold, Inject: isolateGateway},
		{Name: "partition-2-1", Hold: electionHold, Inject: partition21},
		{Name: "kill-restart-each", Inject: killRestartEach},
		{Name: "slow-links-200ms", Hold: 5 * time.Second, Inject: slowLinks},
		// Pipelined publishers: connections reset with publishes in flight.
		{Name: "lossy-gateway-links", Hold: 5 * time.Second, Inject: lossyGatewayLinks, Window: 4},
		// Pipelined publishers whose gateway dies under them retry
		// through another.
		{Name: "kill-gateway-mid-pipeline", Hold: 2 * time.Second, Inject: killGateway, Window: 4, Failover: true},
		// The same with a true kill -9: gateway 2 is the gateway command
		// in a child process, sent SIGKILL.
		{Name: "kill-9-gateway-process", Hold: 2 * time.Second, Inject: kill9Gateway, Window: 4, Failover: true,
			Processes: []int{2}},
	}
}

// isolateLeader cuts every link of the server leading the log stream
// (routes and gateways' links), both ways.
func isolateLeader(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	i := c.Leader(c.RecordStream())
	if i < 0 {
		return nil, fmt.Errorf("no leader of %s", c.RecordStream())
	}
	c.Pause(i)
	return func(ctx context.Context) error { c.Resume(i); return c.WaitHealthy(ctx) }, nil
}

// isolateGateway cuts gateway 0 off every NATS server; its WebSocket
// clients stay connected to it.
func isolateGateway(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	c.Isolate(0)
	return func(context.Context) error { c.Rejoin(0); return nil }, nil
}

// partition21 cuts the routes between the log's leader and the two other
// servers: the leader is the minority.
func partition21(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	i := c.Leader(c.RecordStream())
	if i < 0 {
		return nil, fmt.Errorf("no leader of %s", c.RecordStream())
	}
	c.Partition(i)
	return func(ctx context.Context) error { c.HealRoutes(); return c.WaitHealthy(ctx) }, nil
}

// killRestartEach kills each server in turn, holds it down, starts it
// again on its store and waits for the cluster to be whole before the
// next.
func killRestartEach(ctx context.Context, c *Cluster) (func(context.Context) error, error) {
	for i := range c.servers {
		c.Kill(i)
		if !pause(ctx, 3*time.Second) {
			return nil, ctx.Err()
		}
		if err := c.Start(i); err != nil {
			return nil, err
		}
		if err := c.WaitHealthy(ctx); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

// slowLinks adds 200 ms each way to every link.
func slowLinks(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	c.SetLatency(200 * time.Millisecond)
	return func(context.Context) error { c.SetLatency(0); return nil }, nil
}

// lossyGatewayLinks makes every gateway's NATS links reset one chunk in a
// hundred, both ways: connections drop at random mid-publish.
func lossyGatewayLinks(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	for _, g := range c.gateways {
		for _, p := range g.Links {
			p.Set(Up, Faults{Drop: 0.01})
			p.Set(Down, Faults{Drop: 0.01})
		}
	}
	return func(context.Context) error {
		for _, g := range c.gateways {
			for _, p := range g.Links {
				p.Heal()
			}
		}
		return nil
	}, nil
}

// killGateway kills gateway 2 (KillGateway: its NATS connections end
// without a drain) with its publishers' pipelined publishes in flight;
// they go on through gateway 0. The heal starts it again on its address.
// Gateway 0, which the run's final reads use, stays up.
func killGateway(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	c.KillGateway(2)
	return func(ctx context.Context) error { return c.RestartGateway(ctx, 2) }, nil
}

// kill9Gateway sends gateway 2, a child process (the scenario's
// Processes), SIGKILL with its publishers' pipelined publishes in flight:
// no shutdown of any kind runs in it, and the kernel closes its NATS and
// WebSocket connections. Its publishers go on through gateway 0; the heal
// starts the command again on its address. It fails if the process had
// ended before the signal or ended otherwise than by it.
func kill9Gateway(_ context.Context, c *Cluster) (func(context.Context) error, error) {
	if err := c.Kill9Gateway(2); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return c.RestartGateway(ctx, 2) }, nil
}
