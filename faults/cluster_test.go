package faults

import (
	"context"
	"testing"
	"time"
)

// The routes run through the proxies only: cutting server 0's routes
// leaves it with none (no gossiped address bypasses them), and healing
// them makes the cluster whole again.
func TestClusterRoutesThroughProxies(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three NATS servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := NewCluster(ctx, Options{Gateways: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Partition(0)
	// Two missed pings (1s apart) close the silent routes; the servers
	// have no event for it, so look every 50ms.
	for c.Server(0).NumRoutes() > 0 {
		if !pause(ctx, 50*time.Millisecond) {
			t.Fatalf("server 0 still has %d routes with its routes cut", c.Server(0).NumRoutes())
		}
	}
	if n := c.Server(1).NumRoutes(); n == 0 {
		t.Fatalf("servers 1 and 2 lost their route to each other")
	}
	c.HealRoutes()
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
}
