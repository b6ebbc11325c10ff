package main

// The torture run's embedded NATS servers run in its own process, so the
// process's heap is the gateways' and the servers' together. The baseline
// check holds the gateways to their bound and reports the servers' share
// apart: the servers keep caches of their own (8 MiB file-store blocks
// each, kept for reuse) that are not the gateway's to return.

import (
	"math"
	"runtime"
	"strings"
)

// natsServerPkg prefixes the functions of the embedded NATS server.
const natsServerPkg = "github.com/nats-io/nats-server/"

// heapAllocatedUnder estimates the live heap allocated by calls that
// passed through a function whose name starts with prefix, from the
// runtime's sampled heap profile as of the last collection (scaled as
// pprof scales it). The caller collects first.
func heapAllocatedUnder(prefix string) uint64 {
	n, _ := runtime.MemProfile(nil, true)
	var recs []runtime.MemProfileRecord
	for range 5 { // the profile may grow between the calls
		recs = make([]runtime.MemProfileRecord, n+64)
		var ok bool
		if n, ok = runtime.MemProfile(recs, true); ok {
			recs = recs[:n]
			break
		}
		recs = nil
	}
	rate := float64(runtime.MemProfileRate)
	var total float64
	for i := range recs {
		r := &recs[i]
		bytes, objs := r.InUseBytes(), r.InUseObjects()
		if bytes <= 0 || objs <= 0 || !stackUnder(r.Stack(), prefix) {
			continue
		}
		scale := 1.0
		if rate > 1 {
			scale = 1 / (1 - math.Exp(-float64(bytes)/float64(objs)/rate))
		}
		total += float64(bytes) * scale
	}
	return uint64(total)
}

// stackUnder reports whether a frame of stack is a function of prefix.
func stackUnder(stack []uintptr, prefix string) bool {
	frames := runtime.CallersFrames(stack)
	for {
		f, more := frames.Next()
		if strings.HasPrefix(f.Function, prefix) {
			return true
		}
		if !more {
			return false
		}
	}
}
