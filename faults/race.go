//go:build race

package faults

// raceEnabled: this binary was built with -race (BuildGateway builds the
// gateway command the same way).
const raceEnabled = true
