package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWireFlags: the wire bounds' flags reach the router, and values the
// protocol cannot honour stop the gateway from starting.
func TestWireFlags(t *testing.T) {
	cfg, err := loadConfig([]string{"--max-msg-id-bytes", "8", "--message-timeout", "3s", "--dead-letter-rate", "inf"},
		func(k string) string { return map[string]string{"SWITCHYARD_MAX_FILTER_BYTES": "100"}[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	b := cfg.Wire.bounds()
	if b.MaxMsgIDBytes != 8 || b.MaxFilterBytes != 100 || b.MaxTopicBytes != 255 || cfg.Wire.MessageTimeout != 3*time.Second || b.DeadLetterRate < 1e300 {
		t.Fatalf("bounds %+v, message timeout %v", b, cfg.Wire.MessageTimeout)
	}
	for _, args := range [][]string{{"--max-topic-bytes", "256"}, {"--max-topic-depth", "17"}, {"--max-key-bytes", "-1"}} {
		err := run(context.Background(), append(args, "--addr", "127.0.0.1:0"), func(string) string { return "" }, io.Discard, nil)
		if err == nil || !strings.Contains(err.Error(), "Bounds") {
			t.Errorf("%v: %v", args, err)
		}
	}

	addr := runGateway(t, "--max-msg-id-bytes", "8")
	for id, want := range map[string]int{"12345678": 200, "123456789": 400} {
		resp, err := http.Post("http://"+addr+"/v1/publish", "application/json",
			strings.NewReader(`{"topic":"ids","data":1,"msg_id":"`+id+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("msg_id of %d bytes: %d, want %d", len(id), resp.StatusCode, want)
		}
	}
}
