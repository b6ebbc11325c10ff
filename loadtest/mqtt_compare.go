package main

// --target mqtt: one run that measures the same workload in phases, each a
// whole scenario run of its own against the same gateway (and a Mosquitto
// broker), interleaved for --rounds rounds, and reports each phase's
// median and the ratios:
//
//	native     native WebSocket subscribers (/v1/ws), native publishers
//	mqtt       MQTT-over-WebSocket subscribers (GET /mqtt, QoS 0); the
//	           publishers are the native ones (--mqtt-publish native, the
//	           default, so that the phase differs from "native" by the
//	           subscribers alone) or MQTT QoS 1 over /mqtt (--mqtt-publish mqtt)
//	mosquitto  MQTT-over-TCP subscribers and QoS 1 publishers against the
//	           Mosquitto broker at --mosquitto
//
// It runs the fanout (with --rate 0, the burst) and idle scenarios. The
// subscribers' and publishers' MQTT is in mqtt.go.
//
//	go run ./loadtest fanout --target mqtt --url ws://127.0.0.1:8080 \
//	  --subscribers 1000 --publishers 4 --window 64 --rate 0 --size 83 \
//	  --duration 10s --rounds 3 --server-pid <gateway> --mosquitto-pid <mosquitto>

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"
)

const (
	targetMQTT     = "mqtt"
	phaseNative    = "native"
	phaseMQTT      = "mqtt"
	phaseMosquitto = "mosquitto"
)

// mqttConfig holds the flags of --target mqtt and, per phase, what the
// runner needs.
type mqttConfig struct {
	mqttPhasesRaw string
	mqttPhases    []string
	mosquittoAddr string
	mosquittoPID  int
	mqttVersionN  int
	mqttPublishBy string // native or mqtt, for the mqtt phase

	// Set per phase by mqttCommand.
	mqttVersion byte
	mqttTarget  string // ws:// URL of GET /mqtt or a broker's host:port; "": not an MQTT phase
	mqttPublish bool   // the publishers speak MQTT
}

// mqttFlags registers the flags of --target mqtt.
func mqttFlags(fs *flag.FlagSet, c *mqttConfig) {
	mosq := os.Getenv("SWITCHYARD_MOSQUITTO_ADDR")
	if mosq == "" {
		mosq = "127.0.0.1:1883"
	}
	fs.StringVar(&c.mqttPhasesRaw, "mqtt-phases", "native,mqtt,mosquitto", "with --target mqtt: the phases of each round, in order (native, mqtt, mosquitto; see mqtt_compare.go)")
	fs.StringVar(&c.mosquittoAddr, "mosquitto", mosq, "with --target mqtt: the Mosquitto broker's TCP host:port (loopback; default $SWITCHYARD_MOSQUITTO_ADDR or 127.0.0.1:1883)")
	fs.IntVar(&c.mosquittoPID, "mosquitto-pid", 0, "with --target mqtt: the Mosquitto process id, to report its CPU time and peak RSS")
	fs.IntVar(&c.mqttVersionN, "mqtt-version", 5, "with --target mqtt: the MQTT protocol level of the generator's MQTT connections (4: 3.1.1, or 5)")
	fs.StringVar(&c.mqttPublishBy, "mqtt-publish", "native", "with --target mqtt: the publishers of the mqtt phase: native (WebSocket, as in the native phase) or mqtt (QoS 1 over /mqtt)")
}

// checkMQTT validates the flags of --target mqtt.
func (c *config) checkMQTT() error {
	if c.scenario != "fanout" && c.scenario != "idle" {
		return fmt.Errorf("--target mqtt runs the scenarios fanout and idle, not %q", c.scenario)
	}
	if c.mqttVersionN != 4 && c.mqttVersionN != 5 {
		return fmt.Errorf("--mqtt-version %d: want 4 or 5", c.mqttVersionN)
	}
	c.mqttVersion = byte(c.mqttVersionN)
	if c.mqttPublishBy != "native" && c.mqttPublishBy != "mqtt" {
		return fmt.Errorf("--mqtt-publish %q: want native or mqtt", c.mqttPublishBy)
	}
	c.mqttPhases = nil
	for _, p := range strings.Split(c.mqttPhasesRaw, ",") {
		p = strings.TrimSpace(p)
		switch p {
		case phaseNative, phaseMQTT, phaseMosquitto:
			c.mqttPhases = append(c.mqttPhases, p)
		case "":
		default:
			return fmt.Errorf("--mqtt-phases: unknown phase %q (want native, mqtt, mosquitto)", p)
		}
	}
	if len(c.mqttPhases) == 0 {
		return errors.New("--mqtt-phases names no phase")
	}
	if c.rounds < 1 {
		return errors.New("--rounds must be >= 1")
	}
	return nil
}

// mqttPhaseResult is one phase of one round.
type mqttPhaseResult struct {
	Round  int     `json:"round"`
	Phase  string  `json:"phase"`
	Report *Report `json:"report"`
}

// MQTTComparison is the report of --target mqtt.
type MQTTComparison struct {
	Scenario string             `json:"scenario"`
	Params   map[string]string  `json:"params"`
	Runs     []mqttPhaseResult  `json:"runs"`
	Median   map[string]float64 `json:"median_deliveries_per_s"`
	// Ratios of the medians: mqtt/native and mqtt/mosquitto.
	Ratios map[string]float64 `json:"ratios"`
	Notes  []string           `json:"notes,omitempty"`
}

// mqttCommand runs --target mqtt; it returns the exit code.
func mqttCommand(ctx context.Context, cfg *config, stdout, stderr io.Writer) int {
	cmp, err := runMQTTComparison(ctx, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "loadtest:", err)
		return 1
	}
	if cfg.jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(cmp)
	} else {
		writeMQTTTable(stdout, cmp)
	}
	return 0
}

func runMQTTComparison(ctx context.Context, cfg *config, stderr io.Writer) (*MQTTComparison, error) {
	if cfg.cpuProfile != "" {
		stop, err := startCPUProfile(cfg.cpuProfile)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	base := cfg.url
	if cfg.inprocess {
		gw, err := startInProcess(cfg)
		if err != nil {
			return nil, err
		}
		defer func() { _ = gw.stop() }()
		base = gw.wsURL
	}
	nativeURL, httpURL, err := resolveURLs(ctx, base, cfg.httpURL, true)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(nativeURL)
	u.Path, u.RawQuery = "/mqtt", ""
	mqttURL := u.String()
	if slices.Contains(cfg.mqttPhases, phaseMosquitto) {
		host, _, err := net.SplitHostPort(cfg.mosquittoAddr)
		if err != nil {
			return nil, fmt.Errorf("--mosquitto %q: %w", cfg.mosquittoAddr, err)
		}
		if err := checkLoopback(ctx, host); err != nil {
			return nil, err
		}
	}
	log := stderr
	if cfg.quiet {
		log = io.Discard
	}
	cmp := &MQTTComparison{Scenario: cfg.scenario, Median: map[string]float64{}, Ratios: map[string]float64{}}
	for round := 1; round <= cfg.rounds; round++ {
		for _, phase := range cfg.mqttPhases {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			pc := *cfg
			pc.url, pc.httpURL, pc.subURLs = nativeURL, httpURL, []string{nativeURL}
			pc.target = targetSwitchyard
			switch phase {
			case phaseMQTT:
				pc.mqttTarget, pc.mqttPublish = mqttURL, cfg.mqttPublishBy == "mqtt"
			case phaseMosquitto:
				pc.mqttTarget, pc.mqttPublish = cfg.mosquittoAddr, true
				pc.serverPID = cfg.mosquittoPID
			}
			fmt.Fprintf(log, "round %d: %s\n", round, phase)
			rep, err := newRunner(&pc, log).run(ctx)
			if err != nil {
				return nil, fmt.Errorf("round %d, %s: %w", round, phase, err)
			}
			rep.Target = phase
			if pc.mqttTarget != "" {
				rep.URL = pc.mqttTarget
			}
			cmp.Runs = append(cmp.Runs, mqttPhaseResult{Round: round, Phase: phase, Report: rep})
			cmp.Params = rep.Params
			// Let the previous phase's connections end before the next
			// phase dials.
			time.Sleep(time.Second)
		}
	}
	for _, phase := range cfg.mqttPhases {
		var v []float64
		for _, r := range cmp.Runs {
			if r.Phase == phase {
				v = append(v, r.Report.DeliveriesPerS)
			}
		}
		cmp.Median[phase] = median(v)
	}
	if n := cmp.Median[phaseNative]; n > 0 && slices.Contains(cfg.mqttPhases, phaseMQTT) {
		cmp.Ratios["mqtt/native"] = cmp.Median[phaseMQTT] / n
	}
	if m := cmp.Median[phaseMosquitto]; m > 0 && slices.Contains(cfg.mqttPhases, phaseMQTT) {
		cmp.Ratios["mqtt/mosquitto"] = cmp.Median[phaseMQTT] / m
	}
	cmp.Params["mqtt_version"] = fmt.Sprint(cfg.mqttVersionN)
	cmp.Params["mqtt_publish"] = cfg.mqttPublishBy
	cmp.Params["rounds"] = fmt.Sprint(cfg.rounds)
	if cfg.inprocess {
		cmp.Notes = append(cmp.Notes, "in-process gateway: generator cpu includes the gateway's")
	}
	return cmp, nil
}

func writeMQTTTable(w io.Writer, c *MQTTComparison) {
	var keys []string
	for k := range c.Params {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var ps []string
	for _, k := range keys {
		ps = append(ps, k+"="+c.Params[k])
	}
	fmt.Fprintf(w, "Switchyard load test: %s, --target mqtt\n  params %s\n", c.Scenario, strings.Join(ps, " "))
	fmt.Fprintf(w, "  %-5s %-10s %13s %9s %9s %6s %6s %10s %10s %12s %11s\n",
		"round", "phase", "deliveries/s", "sent", "lost", "disc", "fails", "p50", "p99", "srv µs/del", "srv peak")
	for _, r := range c.Runs {
		rep := r.Report
		cpu, rss := "-", "-"
		if rep.ServerCPUPerD != nil {
			cpu = fmt.Sprintf("%.2f", *rep.ServerCPUPerD)
		}
		if rep.ServerPeakRSS != nil {
			rss = fmt.Sprintf("%.1f MiB", float64(*rep.ServerPeakRSS)/(1<<20))
		}
		fmt.Fprintf(w, "  %-5d %-10s %13.0f %9d %9d %6d %6d %10s %10s %12s %11s\n",
			r.Round, r.Phase, rep.DeliveriesPerS, rep.Sent, rep.Lost, rep.Disconnects, rep.ConnectErrors,
			fmtMs(rep.Latency.P50), fmtMs(rep.Latency.P99), cpu, rss)
	}
	for _, phase := range []string{phaseNative, phaseMQTT, phaseMosquitto} {
		if v, ok := c.Median[phase]; ok {
			fmt.Fprintf(w, "  median %-10s %13.0f deliveries/s\n", phase, v)
		}
	}
	for _, k := range []string{"mqtt/native", "mqtt/mosquitto"} {
		if v, ok := c.Ratios[k]; ok {
			fmt.Fprintf(w, "  ratio %-15s %.2f\n", k, v)
		}
	}
	for _, n := range c.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
}

func fmtMs(ms float64) string { return fmt.Sprintf("%.1f ms", ms) }
