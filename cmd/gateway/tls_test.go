package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// testCA is a certificate authority made for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1000),
		Subject:               pkix.Name{CommonName: "Switchyard test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key with serial, for 127.0.0.1 as a
// server or as a client.
func (ca *testCA) issue(t *testing.T, serial int64, client bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: fmt.Sprintf("switchyard-%d", serial)},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	if client {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// writeFileAtomic replaces path with data as a renewal tool does: a new
// file renamed over the old one.
func writeFileAtomic(t *testing.T, path string, data []byte) {
	t.Helper()
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// serverFiles writes a server certificate of serial and its key into dir.
func serverFiles(t *testing.T, ca *testCA, dir string, serial int64) (certFile, keyFile string) {
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	c, k := ca.issue(t, serial, false)
	writeFileAtomic(t, certFile, c)
	writeFileAtomic(t, keyFile, k)
	return certFile, keyFile
}

// servedSerial makes a new TLS connection to addr and returns the serial of
// the certificate it was shown and the protocol ALPN chose.
func servedSerial(t *testing.T, addr string, ca *testCA) (serial int64, proto string) {
	t.Helper()
	d := &tls.Dialer{Config: &tls.Config{RootCAs: ca.pool, NextProtos: []string{"h2", "http/1.1"}}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	st := c.(*tls.Conn).ConnectionState()
	return st.PeerCertificates[0].SerialNumber.Int64(), st.NegotiatedProtocol
}

// tlsClient is an HTTP client trusting ca that remembers the TLS
// connections it made.
type tlsClient struct {
	*http.Client
	mu    sync.Mutex
	conns []*tls.Conn
}

func newTLSClient(ca *testCA, cert *tls.Certificate) *tlsClient {
	c := &tlsClient{}
	cfg := &tls.Config{RootCAs: ca.pool}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	c.Client = &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			d := &tls.Dialer{Config: cfg}
			nc, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			c.mu.Lock()
			c.conns = append(c.conns, nc.(*tls.Conn))
			c.mu.Unlock()
			return nc, nil
		},
	}}
	return c
}

func (c *tlsClient) close() { c.Transport.(*http.Transport).CloseIdleConnections() }

// TestTLSCertificateRotation: a wss:// session opened with the first
// certificate stays open and keeps receiving after the certificate files
// are replaced, while new connections are shown the new certificate.
func TestTLSCertificateRotation(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := serverFiles(t, ca, dir, 1)
	addr := runGateway(t, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-reload-interval", "20ms")

	if serial, proto := servedSerial(t, addr, ca); serial != 1 || proto != "http/1.1" {
		t.Fatalf("first certificate: serial %d, ALPN %q; want 1, http/1.1", serial, proto)
	}
	ws := newTLSClient(ca, nil)
	defer ws.close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "wss://"+addr+"/v1/ws", &websocket.DialOptions{HTTPClient: ws.Client})
	if err != nil {
		t.Fatal(err)
	}
	defer c.CloseNow()
	frames := wsFrames(ctx, t, c)
	expectOp(t, frames, "welcome")
	send := func(v map[string]any) {
		data, _ := json.Marshal(v)
		if err := c.Write(ctx, websocket.MessageText, data); err != nil {
			t.Fatal(err)
		}
	}
	send(map[string]any{"op": "subscribe", "id": 1, "pattern": "tlsrot.#"})
	expectOp(t, frames, "subscribed")

	pub := newTLSClient(ca, nil)
	defer pub.close()
	publish := func(n int) {
		resp, err := pub.Post("https://"+addr+"/v1/publish", "application/json", strings.NewReader(fmt.Sprintf(`{"topic":"tlsrot.a","data":%d}`, n)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Fatalf("publish over https: %s", resp.Status)
		}
		if m := expectOp(t, frames, "message"); fmt.Sprint(m["data"]) != fmt.Sprint(n) {
			t.Fatalf("message %v, want data %d", m, n)
		}
	}
	publish(1)

	serverFiles(t, ca, dir, 2)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if serial, _ := servedSerial(t, addr, ca); serial == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("new connections still see the first certificate 10s after it was replaced")
		}
		time.Sleep(20 * time.Millisecond)
	}
	pub.close() // the next publish takes a new connection
	publish(2)
	ws.mu.Lock()
	conns := ws.conns
	ws.mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("the WebSocket client made %d connections, want 1", len(conns))
	}
	if s := conns[0].ConnectionState().PeerCertificates[0].SerialNumber.Int64(); s != 1 {
		t.Fatalf("the session's connection shows serial %d, want 1 (the connection it opened)", s)
	}
	c.Close(websocket.StatusNormalClosure, "")
}

// wsFrames reads c's frames onto a channel until c is closed.
func wsFrames(ctx context.Context, t *testing.T, c *websocket.Conn) <-chan map[string]any {
	out := make(chan map[string]any, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			_, data, err := c.Read(ctx)
			if err != nil {
				return
			}
			for _, line := range bytes.Split(data, []byte("\n")) {
				var m map[string]any
				if json.Unmarshal(line, &m) == nil {
					out <- m
				}
			}
		}
	}()
	t.Cleanup(func() { c.CloseNow(); <-done })
	return out
}

// expectOp returns the next frame, which must have op.
func expectOp(t *testing.T, frames <-chan map[string]any, op string) map[string]any {
	t.Helper()
	select {
	case m, ok := <-frames:
		if !ok {
			t.Fatalf("connection closed, want %s", op)
		}
		if m["op"] != op {
			t.Fatalf("got %v, want %s", m, op)
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s frame", op)
	}
	return nil
}

// TestMutualTLS: with --tls-client-ca, a client without a certificate of
// that CA is refused, one with it is served.
func TestMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := serverFiles(t, ca, dir, 1)
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	addr := runGateway(t, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile)

	c, k := ca.issue(t, 7, true)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t)
	oc, ok := other.issue(t, 8, true)
	otherPair, err := tls.X509KeyPair(oc, ok)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		cert *tls.Certificate
		ok   bool
	}{
		{"no certificate", nil, false},
		{"certificate of another CA", &otherPair, false},
		{"certificate of the client CA", &pair, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hc := newTLSClient(ca, tt.cert)
			defer hc.close()
			resp, err := hc.Get("https://" + addr + "/healthz")
			if err == nil {
				resp.Body.Close()
			}
			switch {
			case tt.ok && (err != nil || resp.StatusCode != 200):
				t.Fatalf("refused: %v", err)
			case !tt.ok && err == nil:
				t.Fatalf("served without a client certificate of the CA: %s", resp.Status)
			}
		})
	}
}

// TestTLSTimeoutsCountedByPhase: the router counts server timeouts by the
// phase of the connection (ConnState); behind TLS the phase must still be
// known, so a keep-alive connection that idles out is not counted as a
// client too slow to send its headers.
func TestTLSTimeoutsCountedByPhase(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := serverFiles(t, ca, t.TempDir(), 1)
	addr := runGateway(t, "--tls-cert", certFile, "--tls-key", keyFile, "--idle-timeout", "100ms")
	hc := newTLSClient(ca, nil)
	defer hc.close()
	resp, err := hc.Get("https://" + addr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Wait for the server to close the idle connection: a read on it ends.
	hc.mu.Lock()
	conn := hc.conns[0]
	hc.mu.Unlock()
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data on an idle connection")
	}
	scrape := newTLSClient(ca, nil)
	defer scrape.close()
	if n := tlsMetric(t, scrape, addr, `switchyard_http_timeouts_total{phase="read_header"}`); n != 0 {
		t.Fatalf("an idle keep-alive connection was counted as %v read_header timeouts", n)
	}
}

// tlsMetric scrapes one sample over https; 0 when the series is absent.
func tlsMetric(t *testing.T, hc *tlsClient, addr, series string) float64 {
	t.Helper()
	return scrapeMetric(t, hc.Get, "https://"+addr+"/metrics", series)
}

// TestCertWatcherKeepsAGoodCertificate: a changed pair that does not load
// leaves the current certificate in place; the next change is taken.
func TestCertWatcherKeepsAGoodCertificate(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := serverFiles(t, ca, dir, 1)
	var logged bytes.Buffer
	w, err := loadCertWatcher(tlsSettings{CertFile: certFile, KeyFile: keyFile, ReloadInterval: time.Hour}, slog.New(slog.NewTextHandler(&logged, nil)))
	if err != nil {
		t.Fatal(err)
	}
	serial := func() int64 {
		c, _ := w.getCertificate(nil)
		return c.Leaf.SerialNumber.Int64()
	}
	c2, _ := ca.issue(t, 2, false)
	writeFileAtomic(t, certFile, c2) // the key is still the first one's
	w.check()
	if s := serial(); s != 1 {
		t.Fatalf("a mismatched pair replaced the certificate: serial %d", s)
	}
	serverFiles(t, ca, dir, 3)
	w.check()
	if s := serial(); s != 3 {
		t.Fatalf("serial %d after a good pair was written, want 3", s)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	w.check()
	w.check()
	if s := serial(); s != 3 {
		t.Fatalf("a missing key replaced the certificate: serial %d", s)
	}
	if n := strings.Count(logged.String(), "cannot read the certificate files"); n != 1 {
		t.Fatalf("a missing file logged %d times over two checks, want once:\n%s", n, logged.String())
	}
}

// TestTLSSettingsChecked: the TLS settings that cannot work are refused
// before start, naming them.
func TestTLSSettingsChecked(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := serverFiles(t, ca, dir, 1)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{"cert without key", []string{"--tls-cert", certFile}, "tls-cert needs --tls-key"},
		{"key without cert", []string{"--tls-key", keyFile}, "tls-key needs --tls-cert"},
		{"client CA without cert", []string{"--tls-client-ca", certFile}, "tls-client-ca needs --tls-cert"},
		{"missing file", []string{"--tls-cert", filepath.Join(dir, "none.crt"), "--tls-key", keyFile}, "none.crt"},
		{"key not PEM", []string{"--tls-cert", certFile, "--tls-key", writeConfig(t, "not a key")}, "tls:"},
		{"client CA without certificates", []string{"--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", keyFile}, "no PEM certificate"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := run(context.Background(), append(tt.args, "--addr", "127.0.0.1:0"), noEnv, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want mention of %q", err, tt.want)
			}
		})
	}
}

// TestTLSStartupLines: a TLS gateway announces https and wss URLs.
func TestTLSStartupLines(t *testing.T) {
	ca := newTestCA(t)
	certFile, keyFile := serverFiles(t, ca, t.TempDir(), 1)
	addr, out := startLogged(t, "--tls-cert", certFile, "--tls-key", keyFile)
	for _, want := range []string{"tls=true", "url=https://" + addr + "/", "url=wss://" + addr + "/v1/ws", "url=https://" + addr + "/metrics"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("start-up log lacks %q:\n%s", want, out.String())
		}
	}
}
