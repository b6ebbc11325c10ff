package engine

import "sync/atomic"

// KeyPartition maps a key to one of n partitions with the 32-bit murmur2
// hash (seed 0x9747b28c) over the key's UTF-8 bytes, masked to 31 bits, modulo
// n: the same function Kafka's default partitioner uses, so a key lands on the
// same partition in every process, on every machine and across restarts, and
// agrees with Kafka producers given the same partition count.
func KeyPartition(key string, n int) int {
	if n <= 1 {
		return 0
	}
	return int(uint32(murmur2(key))&0x7fffffff) % n
}

// murmur2 is MurmurHash2 as Kafka's Utils.murmur2 computes it.
func murmur2(data string) int32 {
	const (
		seed = uint32(0x9747b28c)
		m    = uint32(0x5bd1e995)
		r    = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := n &^ 3
	switch n % 4 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// Partitioner picks a partition for each appended record. A Partitioner is
// safe for concurrent use by multiple goroutines.
type Partitioner struct {
	kind PartitionerKind
	n    atomic.Uint64 // records placed without a key
}

// NewPartitioner returns the strategy for kind (KeyHash when empty).
func NewPartitioner(kind PartitionerKind) *Partitioner {
	if kind == "" {
		kind = KeyHash
	}
	return &Partitioner{kind: kind}
}

// Partition returns the partition in [0, parts) for a record with key
// ("" for none).
func (p *Partitioner) Partition(key string, parts int) int {
	if parts <= 1 {
		return 0
	}
	if key != "" && p.kind != RoundRobin {
		return KeyPartition(key, parts)
	}
	i := p.n.Add(1) - 1
	if p.kind == Sticky {
		i /= StickyBatch
	}
	return int(i % uint64(parts))
}
