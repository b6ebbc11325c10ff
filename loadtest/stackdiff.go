package main

// Stack counts: what a baseline check names when a run ends holding more
// goroutines than it started with. The goroutine profile groups the
// process's goroutines by stack; the difference of two profiles, by stack,
// says which code holds the extra ones.

import (
	"bufio"
	"fmt"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
)

// stackCounts is the number of goroutines per stack, a stack named by its
// functions innermost first.
type stackCounts map[string]int

// takeStackCounts reads the process's goroutine profile.
func takeStackCounts() stackCounts {
	var sb strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&sb, 1)
	return parseStackCounts(sb.String())
}

// parseStackCounts reads a goroutine profile written with debug 1: blocks
// of "N @ addresses" followed by "#\taddress\tfunction+offset\tfile:line"
// lines.
func parseStackCounts(profile string) stackCounts {
	counts := stackCounts{}
	n := 0
	var funcs []string
	flush := func() {
		if n > 0 {
			counts[strings.Join(funcs, " < ")] += n
		}
		n, funcs = 0, funcs[:0]
	}
	sc := bufio.NewScanner(strings.NewReader(profile))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			flush()
		case strings.HasPrefix(line, "#"):
			fields := strings.Split(line, "\t")
			if len(fields) >= 3 {
				fn := fields[2]
				if i := strings.LastIndex(fn, "+0x"); i > 0 {
					fn = fn[:i]
				}
				funcs = append(funcs, fn)
			}
		default:
			if at := strings.Index(line, " @ "); at > 0 {
				flush()
				n, _ = strconv.Atoi(line[:at])
			}
		}
	}
	flush()
	return counts
}

// growth lists the stacks after holds more goroutines on than before, the
// largest growth first, at most max of them, each with its first frames
// (depth of them).
func (before stackCounts) growth(after stackCounts, max, depth int) string {
	type grown struct {
		stack string
		by    int
	}
	var gs []grown
	for s, n := range after {
		if d := n - before[s]; d > 0 {
			gs = append(gs, grown{s, d})
		}
	}
	sort.Slice(gs, func(i, j int) bool {
		if gs[i].by != gs[j].by {
			return gs[i].by > gs[j].by
		}
		return gs[i].stack < gs[j].stack
	})
	var sb strings.Builder
	for i, g := range gs {
		if i == max {
			fmt.Fprintf(&sb, "  … and %d more stacks\n", len(gs)-max)
			break
		}
		frames := strings.Split(g.stack, " < ")
		if len(frames) > depth {
			frames = append(frames[:depth], "…")
		}
		fmt.Fprintf(&sb, "  +%d %s\n", g.by, strings.Join(frames, " < "))
	}
	return sb.String()
}
