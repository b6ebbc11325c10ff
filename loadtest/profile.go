package main

// This file writes the generator's CPU profile (--cpu-profile): with
// --inprocess it covers the embedded gateway too, so one profile shows
// where both sides of a run spend their time.

import (
	"fmt"
	"os"
	"runtime/pprof"
)

// startCPUProfile starts profiling into path; stop ends the profile and
// closes the file.
func startCPUProfile(path string) (stop func(), err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("cpu profile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}
