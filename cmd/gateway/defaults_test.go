package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// TestFlagDefaultsMatchThePackages: a gateway whose flags are all at their
// defaults announces the same limits in its welcome frame as a router made
// from zero options, on which the router and session packages pick their
// own defaults. So the flags' defaults are the packages' defaults as
// applied, not only as declared in their Default* constants.
func TestFlagDefaultsMatchThePackages(t *testing.T) {
	gateway := welcomeLimits(t, "ws://"+runGateway(t)+"/v1/ws")

	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(rt)
	alone := welcomeLimits(t, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := rt.Shutdown(ctx); err != nil {
		t.Error(err)
	}
	srv.Close()
	if err := eng.Close(ctx); err != nil {
		t.Error(err)
	}

	if len(alone) < 10 {
		t.Fatalf("welcome limits %v", alone)
	}
	for k, v := range alone {
		if fmt.Sprint(gateway[k]) != fmt.Sprint(v) {
			t.Errorf("%s: the gateway's default flags give %v, the router alone %v", k, gateway[k], v)
		}
	}
	for k := range gateway {
		if _, ok := alone[k]; !ok {
			t.Errorf("%s: announced by the gateway only", k)
		}
	}
}

// welcomeLimits opens a WebSocket session at url and returns the limits of
// its welcome frame.
func welcomeLimits(t *testing.T, url string) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	_, data, err := c.Read(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var m struct {
		Op     string         `json:"op"`
		Limits map[string]any `json:"limits"`
	}
	if err := json.Unmarshal(bytes.SplitN(data, []byte("\n"), 2)[0], &m); err != nil || m.Op != "welcome" {
		t.Fatalf("first frame %s (%v)", data, err)
	}
	return m.Limits
}
