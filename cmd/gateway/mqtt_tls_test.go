package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// freeAddr returns a loopback address with a port free a moment ago (the
// gateway logs, but does not return, the address of a :0 --mqtt-addr).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// mqttConnack sends a level 4 CONNECT on c and reads the CONNACK's
// return code.
func mqttConnack(c net.Conn) (byte, error) {
	if _, err := c.Write([]byte{0x10, 12, 0, 4, 'M', 'Q', 'T', 'T', 4, 2, 0, 30, 0, 0}); err != nil {
		return 0, err
	}
	ack := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, ack); err != nil {
		return 0, err
	}
	return ack[3], nil
}

// TestMQTTMutualTLS: with --tls-client-ca, an MQTT client gets its
// CONNACK only with a certificate of that CA.
func TestMQTTMutualTLS(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := serverFiles(t, ca, dir, 1)
	caFile := filepath.Join(dir, "clients.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	mqttAddr := freeAddr(t)
	runGateway(t, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-client-ca", caFile, "--mqtt-addr", mqttAddr)
	c, k := ca.issue(t, 7, true)
	pair, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		certs []tls.Certificate
		ok    bool
	}{
		{"no certificate", nil, false},
		{"certificate of the client CA", []tls.Certificate{pair}, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			nc, err := (&tls.Dialer{Config: &tls.Config{RootCAs: ca.pool, Certificates: tt.certs}}).DialContext(ctx, "tcp", mqttAddr)
			var rc byte
			if err == nil {
				defer nc.Close()
				rc, err = mqttConnack(nc)
			}
			switch {
			case tt.ok && (err != nil || rc != 0):
				t.Fatalf("refused: %v (return code %d)", err, rc)
			case !tt.ok && err == nil:
				t.Fatalf("CONNACK %d without a client certificate", rc)
			}
		})
	}
}

// TestMQTTListenerServesTLS: with --tls-cert and --tls-key, --mqtt-addr
// serves TLS with the listener's certificate, and a renewed certificate
// reaches new MQTT connections as it does new https ones.
func TestMQTTListenerServesTLS(t *testing.T) {
	ca := newTestCA(t)
	dir := t.TempDir()
	certFile, keyFile := serverFiles(t, ca, dir, 1)
	mqttAddr := freeAddr(t)
	runGateway(t, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-reload-interval", "20ms", "--mqtt-addr", mqttAddr)

	serial := func() int64 {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := (&tls.Dialer{Config: &tls.Config{RootCAs: ca.pool}}).DialContext(ctx, "tcp", mqttAddr)
		if err != nil {
			t.Fatalf("TLS to --mqtt-addr: %v", err)
		}
		defer c.Close()
		// A CONNECT at level 4 is answered with a CONNACK over TLS.
		if rc, err := mqttConnack(c); err != nil || rc != 0 {
			t.Fatalf("CONNACK over TLS: %d, %v", rc, err)
		}
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.Int64()
	}
	if s := serial(); s != 1 {
		t.Fatalf("serial %d, want 1", s)
	}
	serverFiles(t, ca, dir, 2)
	for deadline := time.Now().Add(10 * time.Second); serial() != 2; {
		if time.Now().After(deadline) {
			t.Fatal("MQTT connections still see the first certificate 10s after it was replaced")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
