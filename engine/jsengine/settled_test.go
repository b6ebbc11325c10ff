package jsengine

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/internal/groupstate"
)

// TestSettledEncoding: the runs settled above a position's offset are
// written as [[from,to],...] under "done", and a value written before
// the field existed decodes as none.
func TestSettledEncoding(t *testing.T) {
	for _, tc := range []struct {
		name string
		json string
		want []span
	}{
		{"old value", `{"off":4,"holder":"n1","by":"n1","leases":[{"o":4,"a":1}]}`, nil},
		{"runs", `{"off":4,"by":"n1","leases":[{"o":4,"a":1}],"done":[[5,8],[9,10]]}`, []span{{5, 8}, {9, 10}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var v commitVal
			if err := json.Unmarshal([]byte(tc.json), &v); err != nil {
				t.Fatal(err)
			}
			if v.Off != 4 || !slices.Equal(v.Done, tc.want) {
				t.Fatalf("decoded %+v, want off 4 and done %v", v, tc.want)
			}
			if got := string(v.marshal()); tc.want != nil && got != tc.json {
				t.Fatalf("encoded %s, want %s", got, tc.json)
			}
		})
	}
}

// TestDoneSpans: the runs come from the window's Done flights past the
// first unsettled one and from the runs read from the bucket that the
// window has not reached, merged where they touch, at most limit runs.
func TestDoneSpans(t *testing.T) {
	flight := func(s groupstate.State) *groupstate.Flight {
		return &groupstate.Flight{Rec: &engine.Record{}, State: s}
	}
	gp := &gpart{}
	gp.Committed, gp.Next = 10, 15
	gp.Flights = []*groupstate.Flight{
		flight(groupstate.InFlight), flight(groupstate.Done), flight(groupstate.Done),
		flight(groupstate.Ready), flight(groupstate.Done),
	}
	gp.above = []span{{12, 14}, {15, 17}, {20, 21}}
	if got, want := gp.doneSpans(10), []span{{11, 13}, {14, 17}, {20, 21}}; !slices.Equal(got, want) {
		t.Errorf("doneSpans = %v, want %v", got, want)
	}
	if got, want := gp.doneSpans(2), []span{{11, 13}, {14, 17}}; !slices.Equal(got, want) {
		t.Errorf("doneSpans(2) = %v, want %v", got, want)
	}
	gp.unsettle(16)
	if want := []span{{12, 14}, {15, 16}, {20, 21}}; !slices.Equal(gp.above, want) {
		t.Errorf("after unsettle(16) above = %v, want %v", gp.above, want)
	}
	for _, tc := range []struct {
		off  int64
		want bool
	}{{15, true}, {16, false}, {20, true}, {21, false}} {
		if got := gp.settledAt(tc.off); got != tc.want {
			t.Errorf("settledAt(%d) = %v, want %v", tc.off, got, tc.want)
		}
	}
	if len(gp.above) != 0 {
		t.Errorf("runs passed are kept: %v", gp.above)
	}
}
