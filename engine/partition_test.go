package engine

import (
	"fmt"
	"testing"
)

func TestMurmur2MatchesKafka(t *testing.T) {
	// Vectors from Kafka's own partitioner tests.
	cases := map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	}
	for in, want := range cases {
		t.Run(in, func(t *testing.T) {
			if got := murmur2(in); got != want {
				t.Fatalf("murmur2(%q) = %d, want %d", in, got, want)
			}
		})
	}
}

func TestKeyPartitionStableAndSpread(t *testing.T) {
	const parts, keys = 8, 8000
	counts := make([]int, parts)
	for i := range keys {
		k := fmt.Sprintf("user-%d", i)
		p := KeyPartition(k, parts)
		if p != KeyPartition(k, parts) {
			t.Fatalf("key %q not stable", k)
		}
		counts[p]++
	}
	for p, c := range counts {
		// Expect 1000 per partition; a fair hash stays well within ±20 %.
		if c < 800 || c > 1200 {
			t.Errorf("partition %d got %d of %d keys", p, c, keys)
		}
	}
}

func TestPartitioners(t *testing.T) {
	tests := []struct {
		name string
		kind PartitionerKind
		keys []string
		want []int
	}{
		{"key_hash keyless round-robins", KeyHash, []string{"", "", "", ""}, []int{0, 1, 2, 0}},
		{"key_hash keyed hashes", KeyHash, []string{"foobar", "foobar"}, []int{KeyPartition("foobar", 3), KeyPartition("foobar", 3)}},
		{"round_robin ignores keys", RoundRobin, []string{"foobar", "foobar", "foobar"}, []int{0, 1, 2}},
		{"sticky keyed hashes", Sticky, []string{"foobar"}, []int{KeyPartition("foobar", 3)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewPartitioner(tt.kind)
			for i, k := range tt.keys {
				if got := p.Partition(k, 3); got != tt.want[i] {
					t.Fatalf("record %d (key %q): partition %d, want %d", i, k, got, tt.want[i])
				}
			}
		})
	}
	t.Run("sticky keyless fills a batch then moves on", func(t *testing.T) {
		p := NewPartitioner(Sticky)
		for i := range 3 * StickyBatch {
			if got, want := p.Partition("", 3), i/StickyBatch; got != want {
				t.Fatalf("record %d: partition %d, want %d", i, got, want)
			}
		}
	})
}

func TestBackoff(t *testing.T) {
	p := DefaultGroupPolicy
	want := []string{"200ms", "400ms", "800ms", "1.6s", "3.2s", "6.4s", "10s", "10s"}
	for i, w := range want {
		if got := p.Backoff(i + 1).String(); got != w {
			t.Errorf("Backoff(%d) = %s, want %s", i+1, got, w)
		}
	}
}
