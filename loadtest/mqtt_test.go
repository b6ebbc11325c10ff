package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// mosquittoPhase returns "mosquitto" when a Mosquitto broker answers at
// SWITCHYARD_MOSQUITTO_ADDR (or 127.0.0.1:1883), else "" (a failure with
// SWITCHYARD_REQUIRE_MOSQUITTO=1).
func mosquittoPhase(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("SWITCHYARD_MOSQUITTO_ADDR")
	if addr == "" {
		addr = "127.0.0.1:1883"
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_MOSQUITTO") == "1" {
			t.Fatalf("Mosquitto at %s: %v", addr, err)
		}
		t.Logf("no Mosquitto at %s: the mosquitto phase is left out", addr)
		return ""
	}
	c.Close()
	return phaseMosquitto
}

// TestMQTTTarget runs --target mqtt against an embedded gateway (and
// Mosquitto when one answers): in every phase every confirmed publish
// reaches every subscriber, with a latency sample each, and the report
// carries the medians and ratios.
func TestMQTTTarget(t *testing.T) {
	phases := []string{phaseNative, phaseMQTT}
	if p := mosquittoPhase(t); p != "" {
		phases = append(phases, p)
	}
	tests := []struct {
		args []string
		subs int64 // subscribers per topic
	}{
		{[]string{"fanout", "--subscribers", "5", "--rate", "400"}, 5},
		{[]string{"fanout", "--subscribers", "5", "--rate", "0", "--publishers", "2", "--window", "8", "--mqtt-publish", "mqtt"}, 5},
		{[]string{"fanout", "--subscribers", "3", "--rate", "300", "--mqtt-version", "4", "--mqtt-publish", "mqtt"}, 3},
		{[]string{"idle", "--subscribers", "12", "--topics", "4", "--rate", "40"}, 3},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append(tt.args, "--target", "mqtt", "--inprocess", "--mqtt-phases", strings.Join(phases, ","),
				"--rounds", "1", "--duration", "500ms", "--json", "--quiet")
			if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
				t.Fatalf("exit code %d: %s", code, stderr.String())
			}
			var cmp MQTTComparison
			if err := json.Unmarshal(stdout.Bytes(), &cmp); err != nil {
				t.Fatalf("%v\n%s", err, stdout.String())
			}
			if len(cmp.Runs) != len(phases) {
				t.Fatalf("%d runs, want %d", len(cmp.Runs), len(phases))
			}
			for i, r := range cmp.Runs {
				rep := r.Report
				if r.Phase != phases[i] || rep.Sent == 0 {
					t.Fatalf("run %d: phase %q, sent %d", i, r.Phase, rep.Sent)
				}
				if rep.Lost != 0 || rep.Expected != rep.Sent*tt.subs || rep.Delivered != rep.Expected || rep.Disconnects != 0 || rep.ConnectErrors != 0 {
					t.Errorf("%s: sent %d, expected %d, delivered %d, lost %d, disconnects %d, connect errors %d",
						r.Phase, rep.Sent, rep.Expected, rep.Delivered, rep.Lost, rep.Disconnects, rep.ConnectErrors)
				}
				if rep.Latency.Count != rep.Delivered {
					t.Errorf("%s: latency samples %d, want %d", r.Phase, rep.Latency.Count, rep.Delivered)
				}
				if cmp.Median[r.Phase] <= 0 {
					t.Errorf("%s: median %v", r.Phase, cmp.Median[r.Phase])
				}
			}
			if cmp.Ratios["mqtt/native"] <= 0 {
				t.Errorf("ratios %v", cmp.Ratios)
			}
		})
	}
}

// TestMQTTFlags: --target mqtt refuses what it cannot run.
func TestMQTTFlags(t *testing.T) {
	for _, args := range [][]string{
		{"groups", "--target", "mqtt"},
		{"fanout", "--target", "mqtt", "--mqtt-version", "3"},
		{"fanout", "--target", "mqtt", "--mqtt-phases", "native,nats"},
		{"fanout", "--target", "mqtt", "--mqtt-publish", "http"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%v: exit code %d, want 2; %s", args, code, stderr.String())
		}
	}
}

// TestMQTTPublishEncoding: the generator's PUBLISH decodes with the
// project's codec as a QoS 1 PUBLISH of the topic, packet id and payload
// it was given, at both protocol levels.
func TestMQTTPublishEncoding(t *testing.T) {
	now := time.Unix(0, 1234567890123456789)
	for _, version := range []byte{4, 5} {
		for _, size := range []int{minPayload, 83, 300} {
			b := appendMQTTPublish(nil, version, "lt/x/fanout/t0", 513, size, now)
			pk, n, err := mqtt.DecodePacket(b, version, 1<<20)
			if err != nil || n != len(b) {
				t.Fatalf("v%d size %d: %v (%d of %d bytes)", version, size, err, n, len(b))
			}
			if pk.FixedHeader.Type != packets.Publish || pk.FixedHeader.Qos != 1 || pk.TopicName != "lt/x/fanout/t0" || pk.PacketID != 513 || len(pk.Payload) != size {
				t.Fatalf("v%d size %d: decoded %+v", version, size, pk)
			}
			if ts, ok := intAfter(b, natsMark); !ok || ts != now.UnixNano() {
				t.Fatalf("v%d: send time %d, %v", version, ts, ok)
			}
		}
	}
}
