package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestConfigTopicsErrors: every bad entry of the topics list is refused
// by --check-config with the file's line and what the entry takes.
func TestConfigTopicsErrors(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"not a list", "topics: orders\n", []string{"line 1: topics: expected a list of topics"}},
		{"entry not a mapping", "topics:\n  - orders\n", []string{"line 2: topics: entry 1: expected a mapping"}},
		{"no name", "topics:\n  - partitions: 2\n", []string{"line 2: topics: entry 1: name is missing"}},
		{"bad name", "topics:\n  - name: a..b\n", []string{"line 2", `invalid topic "a..b"`}},
		{"system", "topics:\n  - name: $sys.x\n", []string{"reserved for the gateway"}},
		{"twice", "topics:\n  - name: a\n  - name: a\n", []string{"line 3", "given twice (first on line 2)"}},
		{"unknown key", "topics:\n  - name: a\n    partitons: 2\n", []string{"line 3", `unknown key "partitons"`, "partitions, partitioner"}},
		{"partitions not a number", "topics:\n  - name: a\n    partitions: many\n", []string{"line 3", "partitions: expected an integer"}},
		{"max_bytes", "topics:\n  - name: a\n    retention: {max_bytes: 10}\n", []string{"line 3", `unknown key "max_bytes"`, "not bytes"}},
		{"bad age", "topics:\n  - name: a\n    retention:\n      max_age: soon\n", []string{"line 4", "retention.max_age: expected a duration"}},
		{"bad on_full", "topics:\n  - name: a\n    on_full: wait\n", []string{`topics: "a" (line 2)`, `on_full must be "block" or "drop_oldest"`}},
		{"too many partitions", "max-partitions: 8\ntopics:\n  - name: a\n    partitions: 9\n", []string{`topics: "a" (line 3): partitions (9) is above max-partitions (8)`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			err := run(context.Background(), []string{"check-config", writeConfig(t, tt.yaml)}, noEnv, &out, nil)
			if err == nil {
				t.Fatalf("valid; out %q", out.String())
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	var out bytes.Buffer
	good := "topics:\n  - name: orders.created\n    partitions: 4\n    partitioner: round_robin\n    retention: {max_messages: 500, max_age: 24h}\n    on_full: block\n    block_timeout: 2s\n"
	if err := run(context.Background(), []string{"check-config", writeConfig(t, good)}, noEnv, &out, nil); err != nil {
		t.Fatalf("a good list: %v", err)
	}
}

// TestConfigTopics: the topics of the config exist with their settings
// once the gateway has started; one that exists with other settings is
// kept and the difference logged; a reload creates a topic added to the
// list; --print-config shows the list, which reads back.
func TestConfigTopics(t *testing.T) {
	list := "topics:\n  - name: orders.created\n    partitions: 4\n    retention: {max_messages: 500, max_age: 24h}\n    on_full: block\n    block_timeout: 2s\n"
	file := writeConfig(t, "partitions: 2\n"+list+"  - name: orders.paid\n")
	addr, out := startLogged(t, "--config", file)
	topic := func(name string) (int, map[string]any) {
		resp, err := http.Get("http://" + addr + "/v1/topics/" + name)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}
	waitLog(t, out, 0, "topics of the config created", "orders.created", "orders.paid")
	st, body := topic("orders.created")
	ret, _ := body["retention"].(map[string]any)
	if st != http.StatusOK || body["partitions"] != 4.0 || body["on_full"] != "block" || ret["max_messages"] != 500.0 || ret["max_age"] != "24h0m0s" {
		t.Fatalf("orders.created: %d %v", st, body)
	}
	if st, body := topic("orders.paid"); st != http.StatusOK || body["partitions"] != 2.0 {
		t.Fatalf("orders.paid, with the defaults of the file: %d %v", st, body)
	}

	// Another partition count for an existing topic and a new topic.
	if err := os.WriteFile(file, []byte("partitions: 2\n"+strings.Replace(list, "partitions: 4", "partitions: 6", 1)+"  - name: orders.paid\n  - name: orders.shipped\n    partitions: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := len(out.String())
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, out, at, "level=WARN", "exists with other settings", "orders.created", "partitions 4 (the config says 6)")
	waitLog(t, out, at, "settings reloaded", "topics")
	if st, body := topic("orders.shipped"); st != http.StatusOK || body["partitions"] != 3.0 {
		t.Fatalf("orders.shipped after the reload: %d %v", st, body)
	}
	if _, body := topic("orders.created"); body["partitions"] != 4.0 {
		t.Fatalf("orders.created after the reload: %v (kept as it was)", body)
	}

	var printed bytes.Buffer
	if err := run(context.Background(), []string{"--print-config", "--config", file}, noEnv, &printed, nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"topics:", "name: orders.shipped", "partitions: 6", "max_age: 24h0m0s", "block_timeout: 2s"} {
		if !strings.Contains(printed.String(), w) {
			t.Errorf("--print-config does not show %q:\n%s", w, printed.String())
		}
	}
	back := writeConfig(t, printed.String())
	cfg, err := loadConfig([]string{"--config", back}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	orig, err := loadConfig([]string{"--config", file}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !sameTopics(cfg.TopicList, orig.TopicList) {
		t.Fatalf("read back %+v, want %+v", cfg.TopicList, orig.TopicList)
	}
}
