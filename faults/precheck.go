package faults

// Fast checks of a history before porcupine's search: each names the
// operations that break it, where porcupine can only say that no order
// fits. They are necessary conditions of the model, not a replacement for
// it.

import (
	"fmt"
	"sort"

	"github.com/anishathalye/porcupine"
)

// precheck checks, per log against its last whole read: every
// acknowledged append's data is at its offset; no data is stored twice;
// every point read of an offset the final read holds matches it, and none
// made before it is past its end; and an append acknowledged before
// another was called has the lower offset. It returns up to ten findings.
func precheck(ops []porcupine.Operation) []string {
	var out []string
	add := func(format string, args ...any) {
		if len(out) < 10 {
			out = append(out, fmt.Sprintf(format, args...))
		}
	}
	final := map[string][]string{}
	var finalAt = map[string]int64{}
	for _, op := range ops {
		if in, ok := op.Input.(readIn); ok && in.All && op.Call >= finalAt[in.Log] {
			final[in.Log], finalAt[in.Log] = op.Output.(readOut).Data, op.Call
		}
	}
	for log, data := range final {
		at := map[string]int{}
		for o, d := range data {
			if p, dup := at[d]; dup {
				add("%s: %s stored twice, at offsets %d and %d", log, d, p, o)
			}
			at[d] = o
		}
	}
	type ackd struct {
		call, ret, off int64
		data           string
	}
	acked := map[string][]ackd{}
	for _, op := range ops {
		switch in := op.Input.(type) {
		case appendIn:
			out := op.Output.(appendOut)
			data, ok := final[in.Log]
			if out.Unknown || !ok {
				continue
			}
			acked[in.Log] = append(acked[in.Log], ackd{op.Call, op.Return, out.Offset, in.Data})
			if op.Return < finalAt[in.Log] {
				if out.Offset >= int64(len(data)) {
					add("%s: %s acknowledged at offset %d, the log holds %d records", in.Log, in.Data, out.Offset, len(data))
				} else if data[out.Offset] != in.Data {
					add("%s: %s acknowledged at offset %d, which holds %s", in.Log, in.Data, out.Offset, data[out.Offset])
				}
			}
		case readIn:
			data, ok := final[in.Log]
			if in.All || !ok {
				continue
			}
			// A read past the final read's end is a finding only when it
			// was made before that read: publishes of unknown outcome can
			// still land after it (their gateways finish them), and a
			// subscriber may then be delivered their records.
			d := op.Output.(readOut).Data[0]
			switch {
			case in.Offset >= int64(len(data)) && op.Return < finalAt[in.Log]:
				add("%s: %s read at offset %d before the final read, which holds %d records", in.Log, d, in.Offset, len(data))
			case in.Offset < int64(len(data)) && data[in.Offset] != d:
				add("%s: %s read at offset %d, which holds %s in the final read", in.Log, d, in.Offset, data[in.Offset])
			}
		}
	}
	// Real-time order: scanning by call time, the largest offset of the
	// appends acknowledged before each call must be below its offset.
	for log, as := range acked {
		byRet := append([]ackd(nil), as...)
		sort.Slice(byRet, func(i, j int) bool { return byRet[i].ret < byRet[j].ret })
		sort.Slice(as, func(i, j int) bool { return as[i].call < as[j].call })
		k, best := 0, ackd{off: -1}
		for _, a := range as {
			for k < len(byRet) && byRet[k].ret < a.call {
				if byRet[k].off > best.off {
					best = byRet[k]
				}
				k++
			}
			if best.off >= 0 && best.off >= a.off && best.data != a.data {
				add("%s: %s acknowledged at offset %d before %s was called, which got offset %d", log, best.data, best.off, a.data, a.off)
			}
		}
	}
	return out
}
