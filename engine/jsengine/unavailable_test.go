package jsengine

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
)

// TestUnavailableAPIErrors: JetStream's own "temporarily unavailable"
// answers (a 503 API error, such as err_code 10008 while a stream or the
// meta group elects a leader) are engine.ErrUnavailable, so that clients
// are told to retry, not "internal"; other API errors are not.
func TestUnavailableAPIErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"jetstream 10008", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}, true},
		{"nats 10008, wrapped", fmt.Errorf("kv: %w", &nats.APIError{Code: 503, ErrorCode: nats.JSErrCodeJetStreamNotAvailable, Description: "JetStream system temporarily unavailable"}), true},
		{"jetstream 503 of another code", &jetstream.APIError{Code: 503, ErrorCode: 10039, Description: "insufficient resources"}, true},
		{"stream not found", &jetstream.APIError{Code: 404, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, false},
		{"wrong last sequence", &jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := unavailable("dedupe", tt.err)
			if errors.Is(got, engine.ErrUnavailable) != tt.want {
				t.Errorf("unavailable(%v) = %v: ErrUnavailable %v, want %v", tt.err, got, !tt.want, tt.want)
			}
			if !errors.Is(got, tt.err) {
				t.Errorf("unavailable(%v) lost the cause: %v", tt.err, got)
			}
		})
	}
}
