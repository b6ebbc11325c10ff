package trie

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

// TestTable checks a table against a map through random inserts, updates
// and deletes, with hash functions that make keys share hash bits: all 64
// (every key collides), the low 60 (collisions at the last level), none.
func TestTable(t *testing.T) {
	hashes := []struct {
		name string
		hash func(i int) uint64
	}{
		{"distinct", func(i int) uint64 { return uint64(i) * 0x9e3779b97f4a7c15 }},
		{"low bits shared", func(i int) uint64 { return uint64(i%7) << 60 }},
		{"all bits shared", func(int) uint64 { return 42 }},
		{"sequential", func(i int) uint64 { return uint64(i) }},
	}
	for _, hc := range hashes {
		t.Run(hc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(3, 4))
			var tb table[int]
			want := map[int]*node[int]{}
			check := func(step int) {
				t.Helper()
				if tb.len != len(want) {
					t.Fatalf("step %d: len %d, want %d", step, tb.len, len(want))
				}
				for k := range 80 {
					got := tb.get(strconv.Itoa(k), hc.hash(k))
					if got != want[k] {
						t.Fatalf("step %d: get(%d) = %p, want %p", step, k, got, want[k])
					}
				}
			}
			for step := range 2000 {
				k := rng.IntN(80)
				key := strconv.Itoa(k)
				if _, ok := want[k]; ok && rng.IntN(2) == 0 {
					tb = tb.without(key, hc.hash(k))
					delete(want, k)
				} else {
					c := &node[int]{}
					tb = tb.with(key, hc.hash(k), c)
					want[k] = c
				}
				check(step)
			}
			for k := range want {
				tb = tb.without(strconv.Itoa(k), hc.hash(k))
			}
			if tb.len != 0 || tb.root.ents != nil || tb.root.bits != 0 {
				t.Fatalf("emptied table is not empty: %+v", tb)
			}
		})
	}
}

// TestTablePersistent checks that with and without leave the table they
// start from as it was.
func TestTablePersistent(t *testing.T) {
	var tb table[int]
	nodes := make([]*node[int], 100)
	for i := range nodes {
		nodes[i] = &node[int]{}
		tb = tb.with(strconv.Itoa(i), uint64(i)*0x9e3779b97f4a7c15, nodes[i])
	}
	snap := tb
	for i := range 50 {
		tb = tb.without(strconv.Itoa(i), uint64(i)*0x9e3779b97f4a7c15)
		tb = tb.with(strconv.Itoa(i+50), uint64(i+50)*0x9e3779b97f4a7c15, &node[int]{})
	}
	for i, n := range nodes {
		if got := snap.get(strconv.Itoa(i), uint64(i)*0x9e3779b97f4a7c15); got != n {
			t.Fatalf("snapshot get(%d) = %p, want %p", i, got, n)
		}
	}
	if snap.len != 100 {
		t.Fatalf("snapshot len %d, want 100", snap.len)
	}
}

// FuzzTable runs a table against a map: each byte of ops writes one of 64
// keys (the low 6 bits) or deletes it (the top bit), and hashBits keeps
// only some bits of each key's hash, so that keys share long hash prefixes
// and meet at the collision level.
func FuzzTable(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 0x80, 0x81, 4}, uint64(0))
	f.Add([]byte{5, 6, 7, 0x85, 0x86, 0x87}, uint64(1)<<63|1)
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 0x81, 0x83}, ^uint64(0))
	f.Fuzz(func(t *testing.T, ops []byte, hashBits uint64) {
		hash := func(k int) uint64 { return uint64(k) * 0x9e3779b97f4a7c15 & hashBits }
		var tb table[int]
		want := map[int]*node[int]{}
		for _, op := range ops {
			k := int(op & 63)
			key := strconv.Itoa(k)
			if op&0x80 != 0 {
				if _, ok := want[k]; ok {
					tb = tb.without(key, hash(k))
					delete(want, k)
				}
				continue
			}
			c := &node[int]{}
			tb = tb.with(key, hash(k), c)
			want[k] = c
		}
		if tb.len != len(want) {
			t.Fatalf("len %d, want %d", tb.len, len(want))
		}
		for k := range 64 {
			if got := tb.get(strconv.Itoa(k), hash(k)); got != want[k] {
				t.Fatalf("get(%d) = %p, want %p", k, got, want[k])
			}
		}
	})
}
