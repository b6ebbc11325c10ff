// Command faults runs Switchyard's fault scenarios (package faults) for as
// long as asked: each round starts three NATS servers (R3) and three
// gateways in this process (one runs the gateway command in a child
// process for kill-9-gateway-process, built once at the start), runs a
// publish and fan-out load, injects one fault, heals it and checks the
// whole history. It prints one report per
// run and exits 1 if any run found a violation or a history that is not
// linearizable (its visualization is saved in -history).
//
//	go run ./faults/cmd/faults -rounds 10
//	go run ./faults/cmd/faults -run partition -rounds 50 -history /tmp/h
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"regexp"
	"time"

	"github.com/switchyard/switchyard/faults"
)

func main() {
	rounds := flag.Int("rounds", 3, "times to run every scenario")
	run := flag.String("run", "", "run only the scenarios whose name matches this regular expression")
	history := flag.String("history", os.TempDir(), "directory for failing histories' visualizations")
	hold := flag.Duration("hold", 0, "hold each fault this long instead of the scenario's own hold")
	warmup := flag.Int("warmup", 20, "publishes each publisher has acknowledged before the fault")
	logs := flag.Bool("log", false, "print the gateways' warnings")
	window := flag.Int("window", 0, "publishes each publisher keeps in flight (0: each scenario's own, else 1)")
	flag.Parse()
	re, err := regexp.Compile(*run)
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: -run:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	o := faults.RunOptions{HistoryDir: *history, Warmup: *warmup, Recover: *warmup, Window: *window}
	if *logs {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		o.GatewayOutput = os.Stderr
	}
	// The gateway command, built once for the scenarios that run it;
	// removed before every exit.
	var binDir string
	for _, sc := range faults.Scenarios() {
		if len(sc.Processes) == 0 || !re.MatchString(sc.Name) || binDir != "" {
			continue
		}
		if binDir, err = os.MkdirTemp("", "switchyard-faults-gateway-"); err == nil {
			o.GatewayBinary, err = faults.BuildGateway(ctx, binDir)
		}
		if err != nil {
			os.RemoveAll(binDir)
			fmt.Fprintln(os.Stderr, "faults:", err)
			os.Exit(1)
		}
	}
	if binDir != "" {
		defer os.RemoveAll(binDir)
	}
	failed, runs := 0, 0
	start := time.Now()
	for r := 0; r < *rounds && ctx.Err() == nil; r++ {
		for _, sc := range faults.Scenarios() {
			if !re.MatchString(sc.Name) || ctx.Err() != nil {
				continue
			}
			if *hold > 0 {
				sc.Hold = *hold
			}
			if *window > 0 {
				sc.Window = *window
			}
			runs++
			rep, err := faults.Run(ctx, sc, o)
			switch {
			case err != nil:
				failed++
				fmt.Printf("round %d %s: %v\n", r+1, sc.Name, err)
			case !rep.OK():
				failed++
				fmt.Printf("round %d FAIL %s\n", r+1, rep)
			default:
				fmt.Printf("round %d ok %s\n", r+1, rep)
			}
		}
	}
	fmt.Printf("%d runs, %d failed, in %v\n", runs, failed, time.Since(start).Round(time.Second))
	if failed > 0 {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
		os.Exit(1)
	}
}
