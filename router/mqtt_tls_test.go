package router_test

// MQTT over TLS on the TCP listener (mqtt_tls.go), with paho clients of
// both levels trusting a CA made for the test.

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	mqtt311 "github.com/eclipse/paho.mqtt.golang"
)

// mqttTestTLS returns a server TLS configuration for 127.0.0.1 and the
// pool of the CA that signed it.
func mqttTestTLS(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "mqtt test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "mqtt test server"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}, pool
}

// logWatch is a slog handler that hands the messages of the records it
// is given to a channel (dropping them when it is full).
type logWatch struct{ msgs chan string }

func (w logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w logWatch) Handle(_ context.Context, r slog.Record) error {
	select {
	case w.msgs <- r.Message:
	default:
	}
	return nil
}
func (w logWatch) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w logWatch) WithGroup(string) slog.Handler      { return w }

// TestMQTTOverTLS: with MQTTOptions.TLS, paho clients of levels 5 and 4
// trusting the test CA connect over TLS and exchange a message; a plain
// MQTT client on the same port is refused at once (its connect fails well
// within the connect timeout), with a log line that says why and a count.
func TestMQTTOverTLS(t *testing.T) {
	srvTLS, pool := mqttTestTLS(t)
	logs := logWatch{msgs: make(chan string, 64)}
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.router.MQTT.TLS = srvTLS
		c.router.MQTT.ConnectTimeout = time.Minute // a hang would show as a timeout of the client's
		c.router.Logger = slog.New(logs)
	})
	addr := g.rt.MQTTAddr().String()
	clientTLS := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}

	// MQTT 5 subscriber over TLS.
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	nc, err := (&tls.Dialer{Config: clientTLS}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 4)
	sub := paho.NewClient(paho.ClientConfig{Conn: nc, OnPublishReceived: []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			got <- pr.Packet.Topic + " " + string(pr.Packet.Payload)
			return true, nil
		}}})
	if ca, err := sub.Connect(ctx, &paho.Connect{ClientID: "tls-sub", CleanStart: true, KeepAlive: 30}); err != nil || ca.ReasonCode != 0 {
		t.Fatalf("MQTT 5 over TLS: connack %v, %v", ca, err)
	}
	defer func() {
		_ = sub.Disconnect(&paho.Disconnect{})
		<-sub.Done()
	}()
	if sa, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "tls/+", QoS: 1}}}); err != nil || sa.Reasons[0] != 1 {
		t.Fatalf("subscribe: %v, %v", sa, err)
	}

	// MQTT 3.1.1 publisher over TLS (ssl://).
	opts := mqtt311.NewClientOptions().AddBroker("ssl://" + addr).SetClientID("tls-pub").SetProtocolVersion(4).
		SetTLSConfig(clientTLS).SetAutoReconnect(false).SetConnectTimeout(waitTimeout)
	pub := mqtt311.NewClient(opts)
	if err := wait311(pub.Connect()); err != nil {
		t.Fatalf("MQTT 3.1.1 over TLS: %v", err)
	}
	defer pub.Disconnect(250)
	if err := wait311(pub.Publish("tls/a", 1, false, "over tls")); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "tls/a over tls" {
			t.Fatalf("got %q", m)
		}
	case <-time.After(waitTimeout):
		t.Fatal("the publish over TLS did not reach the subscriber over TLS")
	}

	// A plain client on the TLS port: refused at once, not left hanging.
	start := time.Now()
	plain := mqtt311.NewClient(mqtt311.NewClientOptions().AddBroker("tcp://" + addr).SetClientID("plain").
		SetProtocolVersion(4).SetAutoReconnect(false).SetConnectTimeout(waitTimeout))
	if err := wait311(plain.Connect()); err == nil {
		plain.Disconnect(0)
		t.Fatal("a plain MQTT client connected to the TLS listener")
	}
	if d := time.Since(start); d >= waitTimeout {
		t.Fatalf("the plain client's connect failed only after %v", d)
	}
	for deadline := time.After(waitTimeout); ; {
		select {
		case m := <-logs.msgs:
			if !strings.Contains(m, "does not speak TLS") {
				continue
			}
		case <-deadline:
			t.Fatal("no log line for the plain client")
		}
		break
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_connects_total", map[string]string{"result": "not_tls"}); n != 1 {
		t.Fatalf("not_tls connects %v, want 1", n)
	}
}
