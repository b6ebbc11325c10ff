package engine_test

import (
	"errors"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

func TestJoinRequestValidate(t *testing.T) {
	ok := engine.JoinRequest{Group: "g", Pattern: "a.>"}
	tests := []struct {
		name string
		req  func(r *engine.JoinRequest)
		want bool // valid
	}{
		{"minimal", func(*engine.JoinRequest) {}, true},
		{"full windows", func(r *engine.JoinRequest) {
			r.MaxInFlight, r.MaxLeased, r.MaxLeasedBytes = engine.MaxGroupInFlight, 5, 1<<20
		}, true},
		{"empty group", func(r *engine.JoinRequest) { r.Group = "" }, false},
		{"negative in flight", func(r *engine.JoinRequest) { r.MaxInFlight = -1 }, false},
		{"in flight over max", func(r *engine.JoinRequest) { r.MaxInFlight = engine.MaxGroupInFlight + 1 }, false},
		{"negative member window", func(r *engine.JoinRequest) { r.MaxLeased = -1 }, false},
		{"negative byte window", func(r *engine.JoinRequest) { r.MaxLeasedBytes = -1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := ok
			tc.req(&r)
			err := r.Validate()
			if tc.want && err != nil {
				t.Fatalf("Validate() = %v, want nil", err)
			}
			if !tc.want && !errors.Is(err, engine.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
		})
	}
}
