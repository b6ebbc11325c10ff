package main

// This file is the generator's only tie to the gateway's own packages: with
// --inprocess it embeds a gateway (the router on the in-memory engine) so
// that a quick run needs no separate process. Everything else speaks to the
// gateway over the wire.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

// inproc is an embedded gateway on a loopback port.
type inproc struct {
	wsURL, httpURL string
	stop           func()
}

func startInProcess(cfg *config) (*inproc, error) {
	eng := memengine.New(memengine.Options{
		Policy: engine.GroupPolicy{AckTimeout: cfg.ackTimeout},
	})
	rt, err := router.New(router.Options{
		Engine:        eng,
		Registry:      prometheus.NewRegistry(),
		StatsInterval: -1,
	})
	if err != nil {
		_ = eng.Close(context.Background())
		return nil, fmt.Errorf("in-process gateway: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("in-process gateway: %w", err)
	}
	srv := &http.Server{Handler: rt, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { // exits when stop closes the server
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Println("loadtest: in-process gateway:", err)
		}
	}()
	addr := ln.Addr().String()
	return &inproc{
		wsURL:   "ws://" + addr + "/v1/ws",
		httpURL: "http://" + addr,
		stop: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = rt.Shutdown(ctx)
			_ = srv.Shutdown(ctx)
			<-done
			_ = eng.Close(ctx)
		},
	}, nil
}
