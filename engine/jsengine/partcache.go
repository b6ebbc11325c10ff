package jsengine

// The partition cache. The tail keeps the last cacheSize records of every
// partition in memory, so reads and deliveries near the head cost no
// round trip; a load of the partition's state and Read add to it at the
// front (see read.go). It is guarded by partition.smu.

import (
	"slices"

	"github.com/switchyard/switchyard/engine"
)

// cacheSize is how many recent records of a partition the tail keeps in
// memory for Read and group delivery; older ones are fetched from NATS.
const cacheSize = 512

type cached struct {
	rec *engine.Record
	seq uint64
}

// cachePrepend puts records fetched from NATS in front of p's cache when
// they end where it starts and there is room, so that reading the newest
// records again (the next subscribe with "last") costs no round trip. It
// never evicts a newer record.
func (p *partition) cachePrepend(got []cached) {
	if len(got) == 0 {
		return
	}
	p.smu.Lock()
	defer p.smu.Unlock()
	if len(p.cache) == 0 || len(p.cache) >= cacheSize {
		return
	}
	base := p.cache[0].rec.Offset
	i := 0
	for i < len(got) && got[i].rec.Offset < base {
		i++
	}
	// got[:i] must end just before the cache, be contiguous and retained.
	if i == 0 || got[i-1].rec.Offset != base-1 || got[0].rec.Offset+int64(i-1) != base-1 {
		return
	}
	start := max(0, i-(cacheSize-len(p.cache)))
	for start < i && got[start].rec.Offset < p.earliest {
		start++
	}
	if start == i {
		return
	}
	p.cache = slices.Insert(p.cache, 0, got[start:i]...)
}

// cacheAdd appends c to p's cache of newest records, keeping it contiguous
// (a record past a gap starts it again) and at most cacheSize long. A
// record it holds already (cached by a load before the tail reached it) is
// left as it is. Caller holds smu.
func (p *partition) cacheAdd(c cached) {
	if n := len(p.cache); n > 0 {
		last := p.cache[n-1].rec.Offset
		if c.rec.Offset <= last {
			return
		}
		if c.rec.Offset != last+1 {
			p.cache = p.cache[:0]
		}
	}
	if len(p.cache) >= cacheSize {
		// Resliced, not shifted: the append below copies the cache to a
		// new array once its capacity is used up, so an add costs O(1)
		// amortized rather than a move of the whole cache.
		p.cache = p.cache[len(p.cache)-cacheSize+1:]
	}
	p.cache = append(p.cache, c)
}

// cachedAt returns the record at offset off from p's cache, or nil.
func (p *partition) cachedAt(off int64) *engine.Record {
	p.smu.Lock()
	defer p.smu.Unlock()
	return p.cachedLocked(off)
}

// cachedOrComing returns the record at off from the tail's cache or, when
// it is not there, whether the tail will bring it,
// both seen at one moment: the tail brings every record at or after the
// offset after the last one it announced, once it has announced one.
func (p *partition) cachedOrComing(off int64) (*engine.Record, bool) {
	p.smu.Lock()
	defer p.smu.Unlock()
	if r := p.cachedLocked(off); r != nil {
		return r, false
	}
	return nil, p.tailed > 0 && off >= p.tailed
}

// cachedLocked is cachedAt with p.smu held.
func (p *partition) cachedLocked(off int64) *engine.Record {
	if len(p.cache) == 0 {
		return nil
	}
	i := off - p.cache[0].rec.Offset
	if i < 0 || i >= int64(len(p.cache)) {
		return nil
	}
	return p.cache[i].rec
}

// view returns the partition's earliest and next offsets as this node
// last saw them.
func (p *partition) view() (earliest, next int64) {
	p.smu.Lock()
	defer p.smu.Unlock()
	return p.earliest, p.next
}
