package session

// Taking a batch out of a Queue: AppendBatch copies the frames into one
// buffer, AppendFrames lists them as pieces to be written without a copy.
// Both take control frames first, then the lanes from the highest, then the
// gap frames of streams with nothing queued, within a byte and frame bound.

// AppendBatch takes queued frames and pending gaps and appends them to dst,
// separated by '\n', while the appended bytes stay within maxBytes (the
// first frame is taken whatever its size). Control frames come first, then
// the lanes from the highest, then the gaps of streams with nothing queued.
// It returns the extended buffer and the number of frames appended; 0 means
// there is nothing to write.
func (q *Queue) AppendBatch(dst []byte, maxBytes int) ([]byte, int) {
	b := batch{buf: dst, start: len(dst), max: maxBytes, maxFrames: q.maxFrames}
	q.take(&b)
	return b.buf, b.n
}

// AppendFrames is AppendBatch without copying: it appends to vec the
// pieces of the batch in order (the frames themselves, shared, and a "\n"
// between each two), encoding only gap frames into scratch. It returns the
// extended vec and scratch, the number of frames and the batch's length
// in bytes. The pieces stay valid after the call (queued frames are never
// modified), so they may be written without the queue's lock.
func (q *Queue) AppendFrames(vec [][]byte, scratch []byte, maxBytes int) ([][]byte, []byte, int, int) {
	b := batch{buf: scratch, start: len(scratch), max: maxBytes, maxFrames: q.maxFrames, pieces: true, vec: vec}
	q.take(&b)
	return b.vec, b.buf, b.n, b.size
}

// take fills b from the queue (AppendBatch, AppendFrames).
func (q *Queue) take(b *batch) {
	q.mu.Lock()
	defer q.mu.Unlock()
	clear(q.taken)
	q.taken = q.taken[:0]

	for q.control.n > 0 {
		if !b.add(q.control.at(0).it.Frame) {
			return
		}
		q.ctlBytes -= len(q.control.at(0).it.Frame)
		q.control.popFront()
		q.others--
	}

	for l := numLanes - 1; l >= 0; l-- {
		r := q.lanes[l]
		for r != nil && r.n > 0 {
			sl := r.at(0)
			it, st := &sl.it, sl.st
			// A stream's pending gaps before this offset go first, and
			// a frame that depended on what they stand for is replaced.
			gapped := false
			for len(st.gaps) > 0 && st.gaps[0].from < it.Offset {
				if !q.addGapFrame(b, it.Stream, st) {
					return
				}
				gapped = true
			}
			if gapped {
				if f, ok := it.Ref.(Fallback); ok {
					it.Frame = f.FallbackFrame()
				}
			}
			if !q.addItem(b, it) {
				return
			}
			if it.Ref != nil {
				q.taken = append(q.taken, it.Ref)
			}
			if it.isMessage() {
				q.msgs--
			} else {
				q.others--
			}
			r.count(it, -1)
			s := it.Stream
			r.popFront()
			st.queued--
			if st.queued == 0 {
				if len(st.gaps) == 0 {
					q.release(s, st)
				} else {
					q.markIdle(s, st)
				}
			}
		}
	}

	// Gaps of streams with nothing queued go out as soon as there is room.
	i := 0
	for ; i < len(q.idle); i++ {
		s := q.idle[i]
		st := q.streams[s]
		if st == nil || !st.idle {
			continue // stale entry
		}
		if st.queued > 0 {
			// Its gaps go before its next message, or it is listed again
			// when it empties.
			st.idle = false
			continue
		}
		for len(st.gaps) > 0 {
			if !q.addGapFrame(b, s, st) {
				break
			}
		}
		if len(st.gaps) > 0 {
			break // no room: keep it and the rest for the next batch
		}
		st.idle = false
		q.release(s, st)
	}
	rest := copy(q.idle, q.idle[i:])
	clear(q.idle[rest:])
	q.idle = q.idle[:rest]
	return
}

// Refs returns the non-nil Refs of the items the last AppendBatch took, in
// order. The slice is valid until the next AppendBatch; only the consumer
// (the one goroutine calling AppendBatch) may call Refs.
func (q *Queue) Refs() []any { return q.taken }

// addGapFrame encodes the first pending gap of st into b if it fits.
func (q *Queue) addGapFrame(b *batch, s Stream, st *streamState) bool {
	mark := len(b.buf)
	if b.pieces {
		g := st.gaps[0]
		b.buf = q.encodeGap(b.buf, s, g.from, g.to)
		if !b.add(b.buf[mark:len(b.buf):len(b.buf)]) {
			b.buf = b.buf[:mark]
			return false
		}
		q.gapsSent++
		st.gaps = st.gaps[:copy(st.gaps, st.gaps[1:])]
		return true
	}
	if b.n > 0 {
		b.buf = append(b.buf, '\n')
	}
	g := st.gaps[0]
	b.buf = q.encodeGap(b.buf, s, g.from, g.to)
	if b.n > 0 && (len(b.buf)-b.start > b.max || b.maxFrames > 0 && b.n >= b.maxFrames) {
		b.buf = b.buf[:mark]
		return false
	}
	b.n++
	q.gapsSent++
	st.gaps = st.gaps[:copy(st.gaps, st.gaps[1:])]
	return true
}

// addItem adds a stream item's frame to b, after its FramePrefix if the
// queue has one, reporting whether it fit.
func (q *Queue) addItem(b *batch, it *Item) bool {
	if q.prefix == nil || b.pieces {
		return b.add(it.Frame)
	}
	mark := len(b.buf)
	if b.n > 0 {
		if b.maxFrames > 0 && b.n >= b.maxFrames {
			return false
		}
		b.buf = append(b.buf, '\n')
	}
	b.buf = q.prefix(b.buf, it)
	b.buf = append(b.buf, '\n')
	b.buf = append(b.buf, it.Frame...)
	if b.n > 0 && len(b.buf)-b.start > b.max {
		b.buf = b.buf[:mark]
		return false
	}
	b.n++
	return true
}

// batch is a text frame being built by AppendBatch, or listed in pieces by
// AppendFrames.
type batch struct {
	buf   []byte // the frame (AppendBatch), or the gap frames (AppendFrames)
	start int    // len(buf) before the batch
	max   int
	// maxFrames bounds n when positive.
	maxFrames int
	n         int // frames appended

	pieces bool     // AppendFrames: list the pieces in vec
	vec    [][]byte // the pieces
	size   int      // their bytes
}

// newline is the piece between two frames of an AppendFrames batch.
var newline = []byte{'\n'}

// add appends frame if it fits, reporting whether it did.
func (b *batch) add(frame []byte) bool {
	if b.pieces {
		if b.n > 0 {
			if b.size+1+len(frame) > b.max || b.maxFrames > 0 && b.n >= b.maxFrames {
				return false
			}
			b.vec = append(b.vec, newline)
			b.size++
		}
		b.vec = append(b.vec, frame)
		b.size += len(frame)
		b.n++
		return true
	}
	if b.n > 0 {
		if len(b.buf)-b.start+1+len(frame) > b.max || b.maxFrames > 0 && b.n >= b.maxFrames {
			return false
		}
		b.buf = append(b.buf, '\n')
	}
	b.buf = append(b.buf, frame...)
	b.n++
	return true
}
