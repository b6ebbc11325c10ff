package main

import (
	"strings"
	"testing"
)

func TestStackCountsGrowth(t *testing.T) {
	before := parseStackCounts(`goroutine profile: total 3
2 @ 0x1 0x2
#	0x1	runtime.gopark+0x10	/x/proc.go:1
#	0x2	example.com/a.loop+0x20	/x/a.go:2

1 @ 0x3
#	0x3	example.com/b.wait+0x8	/x/b.go:3
`)
	after := parseStackCounts(`goroutine profile: total 6
5 @ 0x1 0x2
#	0x1	runtime.gopark+0x10	/x/proc.go:1
#	0x2	example.com/a.loop+0x24	/x/a.go:2

1 @ 0x3
#	0x3	example.com/b.wait+0x8	/x/b.go:3
`)
	if before["runtime.gopark < example.com/a.loop"] != 2 {
		t.Fatalf("parsed %v", before)
	}
	got := before.growth(after, 5, 4)
	if want := "  +3 runtime.gopark < example.com/a.loop\n"; got != want {
		t.Fatalf("growth = %q, want %q", got, want)
	}
	if g := after.growth(before, 5, 4); g != "" {
		t.Fatalf("shrinking counted as growth: %q", g)
	}
	many := stackCounts{}
	for _, s := range []string{"a", "b", "c"} {
		many[s] = 1
	}
	if g := (stackCounts{}).growth(many, 2, 1); !strings.Contains(g, "and 1 more") {
		t.Fatalf("no cut: %q", g)
	}
}
