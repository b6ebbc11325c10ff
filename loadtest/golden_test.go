package main

import (
	"encoding/json"
	"testing"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/internal/wire/golden"
)

// TestGoldenFrames reads every server frame of the golden transcripts
// (internal/wire/testdata, lean frames included) with the generator's
// byte-search parser: isOp must tell each op it looks for from every
// other, and the integers it takes from message, published and gap
// frames must be the frame's.
func TestGoldenFrames(t *testing.T) {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	ops := map[string][]byte{
		wire.OpMessage: opMessage, wire.OpGap: opGap, wire.OpPublished: opPublished,
		wire.OpSubscribed: opSubscribed, wire.OpError: opError, wire.OpWelcome: opWelcome,
	}
	n := 0
	for _, tr := range all {
		for _, st := range tr.Received() {
			line := []byte(st.Frame)
			var f struct {
				Op        string `json:"op"`
				Partition int64  `json:"partition"`
				Offset    int64  `json:"offset"`
				Attempt   int64  `json:"attempt"`
				From      int64  `json:"from"`
				To        int64  `json:"to"`
			}
			if err := json.Unmarshal(line, &f); err != nil {
				t.Fatalf("%s:%d: %v", tr.Path, st.Line, err)
			}
			for op, key := range ops {
				if got := isOp(line, key); got != (f.Op == op) {
					t.Errorf("%s:%d: isOp(%s) = %v for %s", tr.Path, st.Line, op, got, line)
				}
			}
			want := map[string]int64{}
			switch f.Op {
			case wire.OpMessage:
				want = map[string]int64{`"partition":`: f.Partition, `"offset":`: f.Offset}
				if f.Attempt > 0 {
					want[`"attempt":`] = f.Attempt
				}
			case wire.OpPublished:
				want = map[string]int64{`"partition":`: f.Partition, `"offset":`: f.Offset}
			case wire.OpGap:
				want = map[string]int64{`"partition":`: f.Partition, `"from":`: f.From, `"to":`: f.To}
			}
			keys := map[string][]byte{`"partition":`: keyPartition, `"offset":`: keyOffset,
				`"attempt":`: keyAttempt, `"from":`: keyFrom, `"to":`: keyTo}
			for k, v := range want {
				n++
				if got, ok := intAfter(line, keys[k]); !ok || got != v {
					t.Errorf("%s:%d: intAfter(%s) = %d, %v; want %d", tr.Path, st.Line, k, got, ok, v)
				}
			}
		}
	}
	if n < 100 {
		t.Fatalf("only %d fields checked", n)
	}
}
