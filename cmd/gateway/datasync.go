package main

// --data-sync: when the embedded server syncs its files to disk.
//
// The default is "always": the server syncs a record's file before it
// acknowledges the publish, so an acknowledged publish survives a power
// loss or a kernel crash, not only a crash of the process (see
// TestPowerLossKeepsAcknowledged). A duration ("2m", the NATS server's own
// default) is the explicit trade: publishes are acknowledged once written
// to the OS page cache, the files are synced every that long, and a power
// loss may lose what was acknowledged since the last sync. The cost of
// "always" on this machine is in docs/BENCHMARKS.md ("Durable by default").

import (
	"fmt"
	"time"
)

// dataSync is the embedded server's sync-to-disk setting: every Interval,
// or after every write when Always is set; the zero value is the NATS
// server's default (every two minutes).
type dataSync struct {
	Always   bool
	Interval time.Duration
}

// defaultDataSync is --data-sync's default: sync before acknowledging.
const defaultDataSync = "always"

// parseDataSync reads --data-sync: "always" or a positive duration.
func parseDataSync(s string) (dataSync, error) {
	if s == "always" {
		return dataSync{Always: true}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return dataSync{}, fmt.Errorf(`data-sync must be "always" or a positive duration, not %q`, s)
	}
	return dataSync{Interval: d}, nil
}
