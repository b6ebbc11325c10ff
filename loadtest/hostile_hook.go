package main

// The connect storm of `soak --hostile`: with --inprocess the gateway runs
// with a connect hook served by hostileHook on loopback. The hook answers
// at once for every address but stormAddr, whose calls take stormHookDelay
// (an application backend under load), so the soak's bystanders connect as
// before while one address hammers upgrades against a slow hook. The
// gateway must refuse that address's connects past its share of the hook
// (--hook-max-concurrent-per-ip, 429 rate_limited, limit
// connect_hook_per_ip; --hook-max-concurrent-per-ip is stormHookShare) without calling the hook for them, and another
// address (probeAddr) must still connect.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"time"
)

const (
	stormAddr      = "127.0.0.2" // the storming client's source address
	probeAddr      = "127.0.0.3" // another address connecting beside it
	stormHookDelay = time.Second
	// stormHookShare is the gateway's --hook-max-concurrent-per-ip in the
	// run: above what the soak's own clients, all on 127.0.0.1, ask at
	// once; the storm's workers are more.
	stormHookShare = 48
	stormWorkers   = stormHookShare + 16
)

// hostileHook is the connect hook of an --inprocess hostile run; nil
// otherwise. The storm runs only when it is set.
var hostileHook atomic.Pointer[connectHook]

// connectHook is a loopback connect hook that allows every connect with
// full grants, slowly for stormAddr.
type connectHook struct {
	url        string
	stormCalls atomic.Int64 // calls for stormAddr
	calls      atomic.Int64
	srv        *http.Server
	done       chan struct{}
	stop       chan struct{} // closed by close: slow answers end at once
}

func startConnectHook() (*connectHook, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := &connectHook{url: "http://" + ln.Addr().String(), done: make(chan struct{}), stop: make(chan struct{})}
	// Idle connections close within a second, so the gateway's hook client
	// holds none (nor their goroutines) once the storm is over.
	h.srv = &http.Server{Handler: http.HandlerFunc(h.serve), ReadHeaderTimeout: 5 * time.Second, IdleTimeout: time.Second}
	go func() { // exits when close shuts the server down
		defer close(h.done)
		_ = h.srv.Serve(ln)
	}()
	return h, nil
}

func (h *connectHook) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RemoteAddr string `json:"remote_addr"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 64<<10)).Decode(&req); err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	h.calls.Add(1)
	if req.RemoteAddr == stormAddr {
		h.stormCalls.Add(1)
		t := time.NewTimer(stormHookDelay)
		select {
		case <-t.C:
		case <-h.stop:
		case <-r.Context().Done():
		}
		t.Stop()
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"allow":true,"grants":{"publish":["#"],"subscribe":["#"],"groups":["#"]}}`)
}

func (h *connectHook) close() error {
	close(h.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := h.srv.Shutdown(ctx)
	<-h.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// closeHostileHook stops the hook of the run, if any.
func closeHostileHook() error {
	if h := hostileHook.Swap(nil); h != nil {
		return h.close()
	}
	return nil
}

// upgradeFrom opens a WebSocket from the loopback address src and returns the
// upgrade's status code.
func (h *hostile) upgradeFrom(ctx context.Context, src string) (int, error) {
	d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	c, err := d.DialContext(ctx, "tcp", h.host)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + h.wsPath + " HTTP/1.1\r\nHost: " + h.host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n"
	if _, err := io.WriteString(c, req); err != nil {
		return 0, err
	}
	resp, err := http.ReadResponse(bufio.NewReaderSize(c, 512), nil)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// connectStorm upgrades from stormAddr again and again, up to 2,000 times
// per worker, closing every admitted session at once.
func (h *hostile) connectStorm(ctx context.Context, a *hostileActor) error {
	for i := 0; i < 2000 && ctx.Err() == nil; i++ {
		h.tally.stormAttempts.Add(1)
		code, err := h.upgradeFrom(ctx, stormAddr)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				return err
			}
			return nil
		case code == http.StatusTooManyRequests:
			h.tally.stormRefused.Add(1)
			a.closed.Add(1)
			pause(ctx, 500*time.Millisecond)
		case code == http.StatusServiceUnavailable:
			// Admitted by the local limits, then the hook, slow for this
			// address, outlived its timeout on a loaded machine: the
			// gateway fails closed, as documented.
			h.tally.stormUnavailable.Add(1)
			pause(ctx, 500*time.Millisecond)
		case code != http.StatusSwitchingProtocols:
			h.problem("connect storm: upgrade answered %d", code)
			pause(ctx, time.Second)
		}
	}
	<-ctx.Done()
	return nil
}

// connectProbe upgrades from probeAddr every 500 ms beside the storm; each
// must be admitted. A single 503 (this address's own hook call outlived
// its timeout on a loaded machine: the gateway failing closed) is counted
// and the next try must get in; two in a row are the storm holding the
// hook's slots, which the per-address share exists to prevent.
func (h *hostile) connectProbe(ctx context.Context, a *hostileActor) error {
	unavailable := 0
	for i := 0; i < 1000 && ctx.Err() == nil; i++ {
		start := time.Now()
		code, err := h.upgradeFrom(ctx, probeAddr)
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case err == nil && code == http.StatusServiceUnavailable && unavailable == 0:
			unavailable++
			h.tally.probeUnavailable.Add(1)
		case err != nil || code != http.StatusSwitchingProtocols:
			h.problem("another address could not connect beside the connect storm: %d %v", code, err)
		default:
			unavailable = 0
			h.tally.probeConnects.Add(1)
			d := time.Since(start).Milliseconds()
			for m := h.tally.probeMaxMS.Load(); d > m && !h.tally.probeMaxMS.CompareAndSwap(m, d); m = h.tally.probeMaxMS.Load() {
			}
		}
		pause(ctx, 500*time.Millisecond)
	}
	<-ctx.Done()
	return nil
}
