package main

import (
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
)

// TestReloadPublishLimitsLive: a reload of the config file applies
// max-message-bytes and http-publish-rate (they are named as reloaded, and
// the next HTTP publishes are held to them); a max-message-bytes past what
// the frame size fixed at start carries is refused, naming it.
func TestReloadPublishLimitsLive(t *testing.T) {
	file := writeConfig(t, "log-level: info\n")
	addr, _ := startLogged(t, "--config", file)
	reload := func(text string) (int, map[string]any) {
		t.Helper()
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return post(t, addr, "/v1/admin/reload", "")
	}
	st, body := reload("log-level: info\nmax-message-bytes: 16\nhttp-publish-rate: 1\n")
	reloaded, _ := body["reloaded"].([]any)
	if st != http.StatusOK || !slices.Contains(reloaded, any("max-message-bytes")) || !slices.Contains(reloaded, any("http-publish-rate")) {
		t.Fatalf("reload: %d %v", st, body)
	}
	if st, body := post(t, addr, "/v1/publish", `{"topic":"a.b","data":"`+strings.Repeat("x", 30)+`"}`); body["code"] != "message_too_large" {
		t.Fatalf("publish over the reloaded size: %d %v", st, body)
	}
	if st, body := post(t, addr, "/v1/publish", `{"topic":"a.b","data":1}`); st != http.StatusOK {
		t.Fatalf("first publish: %d %v", st, body)
	}
	if st, body := post(t, addr, "/v1/publish", `{"topic":"a.b","data":2}`); body["code"] != "rate_limited" {
		t.Fatalf("second publish within the second at 1/s: %d %v", st, body)
	}
	st, body = reload("log-level: info\nmax-message-bytes: 100000000\nhttp-publish-rate: 1\n")
	if msg, _ := body["message"].(string); st != http.StatusBadRequest || !strings.Contains(msg, "--max-message-bytes") {
		t.Fatalf("reload past the frame size: %d %v", st, body)
	}
}

func post(t *testing.T, addr, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}
