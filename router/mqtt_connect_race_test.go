package router_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// dialTakenErr is dialTaken for another goroutine: it reports a failed
// connect instead of failing the test.
func dialTakenErr(t *testing.T, g *gateway, id string) (*takenClient, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := dialMQTTConn(ctx, g, "tcp")
	if err != nil {
		return nil, err
	}
	tc := &takenClient{msgs: make(chan string, 64), disc: make(chan byte, 1)}
	tc.c = paho.NewClient(paho.ClientConfig{Conn: nc,
		OnServerDisconnect: func(d *paho.Disconnect) { tc.disc <- d.ReasonCode }})
	expiry := uint32(0)
	if _, err := tc.c.Connect(ctx, &paho.Connect{ClientID: id, CleanStart: true, KeepAlive: 30,
		Properties: &paho.ConnectProperties{SessionExpiryInterval: &expiry}}); err != nil {
		nc.Close()
		return nil, err
	}
	t.Cleanup(func() {
		_ = tc.c.Disconnect(&paho.Disconnect{})
		select {
		case <-tc.c.Done():
		case <-time.After(waitTimeout):
			t.Error("paho client did not stop")
		}
	})
	return tc, nil
}

// TestMQTTSimultaneousConnects: two clean CONNECTs of one client id
// through two gateways (and through one) at once, 40 times: exactly one connection must be
// ended (DISCONNECT 0x8E) and the other must run on.
func TestMQTTSimultaneousConnects(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	a, b := newJSGateway(t, url, prefix), newJSGateway(t, url, prefix)
	for i := 0; i < 40; i++ {
		gws := []*gateway{a, b}
		if i%2 == 1 {
			gws = []*gateway{a, a} // both through one gateway
		}
		id := fmt.Sprintf("rv2-sim-%d", i)
		remote0 := metricValue(t, a.reg, "switchyard_mqtt_takeovers_total", map[string]string{"where": "remote"})
		var cs [2]*takenClient
		var errs [2]error
		var wg sync.WaitGroup
		for k := range gws {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cs[k], errs[k] = dialTakenErr(t, gws[k], id)
			}()
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil {
			t.Fatalf("round %d: connects %v, %v", i, errs[0], errs[1])
		}
		ended := -1
		select {
		case rc := <-cs[0].disc:
			ended = 0
			_ = rc
		case <-cs[1].disc:
			ended = 1
		case <-time.After(waitTimeout):
			t.Fatalf("round %d: neither connection was ended", i)
		}
		other := cs[1-ended]
		select {
		case rc := <-other.disc:
			remote := metricValue(t, a.reg, "switchyard_mqtt_takeovers_total", map[string]string{"where": "remote"})
			t.Fatalf("round %d: both connections ended (the one through gateway %d with %#x; gateway a counted %v remote takeovers in this round)", i, 1-ended, rc, remote-remote0)
		case <-time.After(300 * time.Millisecond):
		}
	}
}
