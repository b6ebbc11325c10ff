package main

// --data-sync: how often the embedded server syncs its files to disk.

import (
	"fmt"
	"time"
)

// dataSync is the embedded server's sync-to-disk setting: every Interval,
// or after every write when Always is set; the zero value is the NATS
// default (every two minutes).
type dataSync struct {
	Always   bool
	Interval time.Duration
}

// defaultDataSync is --data-sync's default, the NATS server's own.
const defaultDataSync = "2m"

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
