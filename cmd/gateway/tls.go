package main

// TLS of the gateway's listeners: https and wss on --addr, and MQTT over
// TLS on --mqtt-addr (main.go): one certificate, one watcher, one set of
// client CAs for both.
//
// The certificate and key are read at start and again whenever their files
// change: a certWatcher polls the files' size and modification time every
// --tls-reload-interval and, when either changed and the pair loads,
// replaces the certificate that GetCertificate hands to each new
// handshake. Connections already open keep the session keys of their own
// handshake, so a renewal (certbot, cert-manager writing a Secret's files)
// drops nobody. A pair that does not load (a key written after its
// certificate, a typo) is logged and the previous certificate kept; the
// next change is tried again.
//
// Only HTTP/1.1 is offered (ALPN "http/1.1"): a WebSocket upgrade is an
// HTTP/1.1 request, and a client that negotiated h2 could only open one
// through extended CONNECT (RFC 8441), which the gateway does not serve.
// Offering h2 would buy SSE and long polls multiplexing, and cost a
// WebSocket client that picks h2 for its handshake its connection.
//
// Concurrency: a certWatcher is safe for concurrent use; its goroutine is
// started by startCertWatcher and stopped, and waited for, by stop.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// defaultTLSReloadInterval is how often the certificate files are looked
// at: two stat calls, so often enough that a renewed certificate is served
// within seconds of landing.
const defaultTLSReloadInterval = 5 * time.Second

// tlsSettings name the files of the gateway's certificate.
type tlsSettings struct {
	CertFile       string
	KeyFile        string
	ClientCAFile   string
	ReloadInterval time.Duration
}

// enabled reports whether the listener serves TLS.
func (s tlsSettings) enabled() bool { return s.CertFile != "" || s.KeyFile != "" }

// validate checks the settings without reading the files.
func (s tlsSettings) validate() error {
	switch {
	case s.CertFile == "" && s.KeyFile != "":
		return errors.New("tls-key needs --tls-cert")
	case s.CertFile != "" && s.KeyFile == "":
		return errors.New("tls-cert needs --tls-key")
	case s.ClientCAFile != "" && !s.enabled():
		return errors.New("tls-client-ca needs --tls-cert and --tls-key")
	case s.enabled() && s.ReloadInterval <= 0:
		return errors.New("tls-reload-interval must be positive")
	}
	return nil
}

// fileStamp identifies a version of a file well enough to notice it was
// replaced.
type fileStamp struct {
	size int64
	mod  time.Time
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{fi.Size(), fi.ModTime()}, nil
}

// certWatcher holds the current certificate of a listener and replaces it
// when its files change.
type certWatcher struct {
	certFile, keyFile string
	log               *slog.Logger
	cert              atomic.Pointer[tls.Certificate]

	mu      sync.Mutex // guards following
	stamp   [2]fileStamp
	statErr string // the last error stating the files, logged once
	stop    func() // stops the goroutine and waits for it
}

// loadCertWatcher reads the certificate and key of s; it starts nothing.
func loadCertWatcher(s tlsSettings, log *slog.Logger) (*certWatcher, error) {
	w := &certWatcher{certFile: s.CertFile, keyFile: s.KeyFile, log: log}
	if err := w.reload(); err != nil {
		return nil, err
	}
	return w, nil
}

// startCertWatcher loads the certificate of s and starts a goroutine that
// reloads it when its files change, until stop is called.
func startCertWatcher(s tlsSettings, log *slog.Logger) (*certWatcher, error) {
	w, err := loadCertWatcher(s, log)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(s.ReloadInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				w.check()
			}
		}
	}()
	w.stop = func() { cancel(); <-done }
	return w, nil
}

// close stops the watcher's goroutine, if started, and waits for it.
func (w *certWatcher) close() {
	if w != nil && w.stop != nil {
		w.stop()
	}
}

// check reloads the pair if either file changed since it was last read.
func (w *certWatcher) check() {
	cs, err1 := stampOf(w.certFile)
	ks, err2 := stampOf(w.keyFile)
	w.mu.Lock()
	old, lastErr := w.stamp, w.statErr
	w.statErr = ""
	if err := errors.Join(err1, err2); err != nil {
		w.statErr = err.Error()
	}
	w.mu.Unlock()
	if err := errors.Join(err1, err2); err != nil {
		if err.Error() != lastErr {
			w.log.Warn("tls: cannot read the certificate files; keeping the current certificate", "err", err)
		}
		return
	}
	if cs == old[0] && ks == old[1] {
		return
	}
	if err := w.reload(); err != nil {
		// Remember the stamps so that the error is logged once per change.
		w.mu.Lock()
		w.stamp = [2]fileStamp{cs, ks}
		w.mu.Unlock()
		w.log.Warn("tls: the changed certificate does not load; keeping the current one", "err", err)
		return
	}
	leaf := w.cert.Load().Leaf
	w.log.Info("tls: certificate reloaded", "subject", leaf.Subject.String(), "serial", leaf.SerialNumber.String(), "not_after", leaf.NotAfter)
}

// reload reads the pair and makes it the current certificate.
func (w *certWatcher) reload() error {
	// Stamps first: a file replaced while it is read is read again next time.
	cs, err1 := stampOf(w.certFile)
	ks, err2 := stampOf(w.keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("tls: %w", err)
	}
	cert, err := tls.LoadX509KeyPair(w.certFile, w.keyFile)
	if err != nil {
		return fmt.Errorf("tls: %s and %s: %w", w.certFile, w.keyFile, err)
	}
	// LoadX509KeyPair fills in Leaf since Go 1.23.
	if cert.Leaf == nil {
		if cert.Leaf, err = x509.ParseCertificate(cert.Certificate[0]); err != nil {
			return fmt.Errorf("tls: %s: %w", w.certFile, err)
		}
	}
	w.mu.Lock()
	w.stamp = [2]fileStamp{cs, ks}
	w.mu.Unlock()
	w.cert.Store(&cert)
	return nil
}

// getCertificate is the tls.Config's GetCertificate: the current
// certificate, whatever the client asked for.
func (w *certWatcher) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return w.cert.Load(), nil
}

// serverTLSConfig returns the TLS configuration of a listener serving the
// certificate w holds, requiring client certificates signed by a CA of
// clientCAFile when it is set (mutual TLS), and offering nextProtos in
// ALPN ("http/1.1" for the HTTP listener; none for MQTT's). TLS 1.2
// is the oldest version accepted; TLS 1.2 connections get forward-secret
// AEAD suites only (TLS 1.3's suites are not configurable and all fit).
func serverTLSConfig(w *certWatcher, clientCAFile string, nextProtos ...string) (*tls.Config, error) {
	c := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: w.getCertificate,
		NextProtos:     nextProtos,
		CipherSuites: []uint16{
			tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
			tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
			tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
			tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
		},
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls-client-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls-client-ca %s: no PEM certificate in the file", clientCAFile)
		}
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return c, nil
}

// httpALPN is the one protocol the HTTP listener offers in ALPN; the
// comment at the top of this file says why not h2.
const httpALPN = "http/1.1"

// serveTLS wraps ln, a listener from router.Listener, in TLS for srv, a
// server from router.NewServer. TLS goes outside the router's counting
// listener so that net/http sees the *tls.Conn (for Request.TLS and the
// handshake under the header timeout) and the counter sees the bytes of
// the connection; srv's ConnState hook, which follows the counting
// connection's state, is handed the connection under the TLS one.
func serveTLS(srv *http.Server, ln net.Listener, c *tls.Config) net.Listener {
	if track := srv.ConnState; track != nil {
		srv.ConnState = func(nc net.Conn, s http.ConnState) {
			if tc, ok := nc.(*tls.Conn); ok {
				nc = tc.NetConn()
			}
			track(nc, s)
		}
	}
	return tls.NewListener(ln, c)
}
