package faults

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"testing"
	"time"
)

var verbose = flag.Bool("faults.log", false, "log the gateways' warnings")

func runScenario(t *testing.T, sc Scenario) {
	t.Helper()
	o := RunOptions{HistoryDir: os.Getenv("FAULTS_HISTORY_DIR")}
	if *verbose {
		o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	r, err := Run(ctx, sc, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r)
	if !r.OK() {
		t.Fatalf("%s", r)
	}
}

// A run with no fault: the harness itself finds nothing wrong.
func TestScenarioNoFault(t *testing.T) {
	if testing.Short() {
		t.Skip("a cluster of three NATS servers and three gateways")
	}
	runScenario(t, Scenario{Name: "no-fault", Hold: time.Second,
		Inject: func(context.Context, *Cluster) (func(context.Context) error, error) { return nil, nil }})
}

func TestScenarios(t *testing.T) {
	if testing.Short() {
		t.Skip("five faults on a cluster of three NATS servers and three gateways")
	}
	for _, sc := range Scenarios() {
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, sc) })
	}
}
