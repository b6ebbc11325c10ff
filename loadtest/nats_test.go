package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startNATS runs an embedded NATS server with a WebSocket listener on a
// loopback port and returns its ws:// URL; it is shut down with the test.
func startNATS(t *testing.T) string {
	t.Helper()
	opts := &server.Options{
		Host:   "127.0.0.1",
		Port:   -1,
		NoLog:  true,
		NoSigs: true,
		Websocket: server.WebsocketOpts{
			Host:  "127.0.0.1",
			Port:  -1,
			NoTLS: true,
		},
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start() // returns once started; Shutdown stops what it started
	t.Cleanup(func() {
		ns.Shutdown()
		ns.WaitForShutdown()
	})
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	return ns.WebsocketURL()
}

// TestNATSTarget runs the scenarios of --target nats against an embedded
// NATS server: every confirmed publish reaches every subscriber of its
// subject, with a latency sample each.
func TestNATSTarget(t *testing.T) {
	url := startNATS(t)
	tests := []struct {
		args []string
		subs int64 // subscribers per topic
	}{
		{[]string{"fanout", "--subscribers", "5", "--rate", "400"}, 5},
		{[]string{"fanout", "--subscribers", "5", "--rate", "0", "--publishers", "2", "--window", "8"}, 5},
		{[]string{"idle", "--subscribers", "12", "--topics", "4", "--rate", "40"}, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(tt.args, "--target", "nats", "--url", url, "--duration", "500ms", "--json", "--quiet")
			if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d: %s", code, stderr.String())
			}
			var rep Report
			if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
				t.Fatal(err)
			}
			if rep.Target != "nats" || rep.Sent == 0 {
				t.Fatalf("target %q, sent %d", rep.Target, rep.Sent)
			}
			if rep.Lost != 0 || rep.Expected != rep.Sent*tt.subs || rep.Delivered != rep.Expected || rep.Disconnects != 0 {
				t.Errorf("sent %d, expected %d, delivered %d, lost %d, disconnects %d",
					rep.Sent, rep.Expected, rep.Delivered, rep.Lost, rep.Disconnects)
			}
			if rep.Latency.Count != rep.Delivered {
				t.Errorf("latency samples %d, want %d", rep.Latency.Count, rep.Delivered)
			}
		})
	}
}

// TestNATSReaderSplitsFrames: protocol messages cut anywhere across frames
// parse the same as whole ones.
func TestNATSReaderSplitsFrames(t *testing.T) {
	stream := []byte("INFO {}\r\nMSG a.t1 1 5\r\nhello\r\nPONG\r\nMSG a.t2 1 r.x 3\r\n\r\n\r\r\n-ERR 'x'\r\n")
	want := []string{"MSG a.t1 hello", "PONG  ", "MSG a.t2 \r\n\r", "-ERR  -ERR 'x'"}
	for cut := 1; cut < len(stream); cut++ {
		var got []string
		nr := &natsReader{}
		h := func(kind, subject, payload []byte) bool {
			got = append(got, fmt.Sprintf("%s %s %s", bytes.TrimSpace(kind), subject, payload))
			return true
		}
		for _, part := range [][]byte{stream[:cut], stream[cut:]} {
			nr.buf = append(nr.buf, part...)
			if ok, err := nr.parse(context.Background(), h); !ok || err != nil {
				t.Fatalf("cut %d: parse: %v %v", cut, ok, err)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) || len(nr.buf) != 0 {
			t.Fatalf("cut %d: got %q (left %q), want %q", cut, got, nr.buf, want)
		}
	}
}
