package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
	"github.com/switchyard/switchyard/router"
)

// TestConfigTopicPolicies: wildcard entries of the config file's topics
// list set the topics a publish creates, on the memory and the nats
// engine: the first matching pattern decides, GET /v1/topics/{name} names
// it, and a topic no pattern matches takes the file's topic defaults.
func TestConfigTopicPolicies(t *testing.T) {
	list := "partitions: 2\ntopics:\n  - pattern: sensors.*.temp\n    partitions: 3\n    retention: {max_messages: 40}\n  - pattern: 'sensors.#'\n    partitions: 5\n  - name: fixed.one\n"
	for _, eng := range []string{"memory", "nats"} {
		t.Run(eng, func(t *testing.T) {
			args := []string{"--config", writeConfig(t, list), "--engine", eng}
			if eng == "nats" {
				url := natstest.URL(t)
				args = append(args, "--nats-url", url, "--nats-prefix", natstest.Prefix(t, url))
			}
			addr, _ := startLogged(t, args...)
			for _, topic := range []string{"sensors.a.temp", "sensors.b", "misc.c"} {
				if st, body := post(t, addr, "/v1/publish", `{"topic":"`+topic+`","data":1}`); st != http.StatusOK {
					t.Fatalf("publish to %s: %d %v", topic, st, body)
				}
			}
			for _, tc := range []struct {
				topic, policy string
				partitions    float64
			}{
				{"sensors.a.temp", "sensors.*.temp", 3},
				{"sensors.b", "sensors.#", 5},
				{"misc.c", "", 2},
				{"fixed.one", "fixed.one", 2}, // an exact entry is its topic's policy
			} {
				resp, err := http.Get("http://" + addr + "/v1/topics/" + tc.topic)
				if err != nil {
					t.Fatal(err)
				}
				var body map[string]any
				_ = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				policy, _ := body["policy"].(string)
				if resp.StatusCode != 200 || body["partitions"] != tc.partitions || policy != tc.policy {
					t.Errorf("%s: %d %v, want %v partitions and policy %q", tc.topic, resp.StatusCode, body, tc.partitions, tc.policy)
				}
			}
		})
	}
}

// TestConfigTopicPolicyAccess: the router's settings of a topics entry
// (max_last, presence) apply to the topics it matches, an exact name's
// entry to that topic; a reload that changes only the topics list applies
// them to the next subscribe; --print-config shows them and reads back.
func TestConfigTopicPolicyAccess(t *testing.T) {
	list := func(chatLast int) string {
		return fmt.Sprintf("max-last: 10\ntopics:\n  - pattern: 'chat.#'\n    max_last: %d\n    presence: false\n"+
			"    anonymous: {publish: true, subscribe: true}\n    mqtt: {retained: false}\n  - name: fixed.one\n    max_last: 50\n", chatLast)
	}
	file := writeConfig(t, list(2))
	addr, out := startLogged(t, "--config", file)
	c := dialNode(t, &node{addr: addr})
	id := 0
	try := func(req map[string]any) map[string]any {
		t.Helper()
		id++
		req["id"] = id
		c.send(t, req)
		for range 10 {
			if m := c.next(t); m["id"] == float64(id) {
				return m
			}
		}
		t.Fatalf("no reply to %v", req)
		return nil
	}
	last := func(pattern string, n int) any {
		return try(map[string]any{"op": "subscribe", "pattern": pattern, "from": map[string]any{"last": n}})["op"]
	}
	if got := last("chat.a", 3); got != "error" {
		t.Errorf("chat.a last 3: %v, want an error", got)
	}
	if got := last("chat.b", 2); got != "subscribed" {
		t.Errorf("chat.b last 2: %v", got)
	}
	if got := last("fixed.one", 50); got != "subscribed" {
		t.Errorf("fixed.one last 50: %v", got)
	}
	if m := try(map[string]any{"op": "subscribe", "pattern": "chat.p", "presence": true}); m["code"] != "forbidden" {
		t.Errorf("presence on chat.p: %v", m)
	}

	if err := os.WriteFile(file, []byte(list(5)), 0o600); err != nil {
		t.Fatal(err)
	}
	at := len(out.String())
	if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	waitLog(t, out, at, "settings reloaded")
	if got := last("chat.c", 5); got != "subscribed" {
		t.Errorf("chat.c last 5 after the reload: %v", got)
	}

	var printed bytes.Buffer
	if err := run(context.Background(), []string{"--print-config", "--config", file}, noEnv, &printed, nil); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"max_last: 5", "presence: false", "publish: true", "subscribe: true", "retained: false", "max_last: 50"} {
		if !strings.Contains(printed.String(), w) {
			t.Errorf("--print-config does not show %q:\n%s", w, printed.String())
		}
	}
	back, err := loadConfig([]string{"--config", writeConfig(t, printed.String())}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	orig, err := loadConfig([]string{"--config", file}, noEnv, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !sameTopics(back.TopicList, orig.TopicList) {
		t.Fatalf("read back %+v, want %+v", back.TopicList, orig.TopicList)
	}
	p := topicPolicies(orig)
	if len(p) != 2 || p[0].Pattern != "chat.#" || !p[0].Anonymous.Publish || !p[0].Anonymous.Subscribe ||
		p[0].MQTTRetain == nil || *p[0].MQTTRetain || p[1].Pattern != "fixed.one" || p[1].MaxLast != 50 {
		t.Errorf("policies %+v", p)
	}
}

// TestWarnOpenPolicyPublish: a topic policy granting anonymous publish
// gets the start-up warning about anonymous publishing beyond loopback,
// naming its pattern; one granting subscribe only, or any without
// anonymous access, gets none.
func TestWarnOpenPolicyPublish(t *testing.T) {
	all := &net.TCPAddr{IP: net.IPv4zero, Port: 8080}
	cfg := func(list string) config {
		c, err := loadConfig([]string{"--config", writeConfig(t, "topics:\n"+list)}, noEnv, &bytes.Buffer{})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	anon := router.AuthOptions{AdminKey: "k", Anonymous: &router.Grants{Subscribe: []string{"public.#"}}}
	for _, tt := range []struct {
		name string
		auth router.AuthOptions
		list string
		want bool
	}{
		{"publish", anon, "  - pattern: 'chat.#'\n    anonymous: {publish: true}\n", true},
		{"subscribe only", anon, "  - pattern: 'chat.#'\n    anonymous: {subscribe: true}\n", false},
		{"no anonymous access", router.AuthOptions{AdminKey: "k"}, "  - pattern: 'chat.#'\n    anonymous: {publish: true}\n", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			warnOpen(slog.New(slog.NewTextHandler(&out, nil)), all, withPolicyPublish(tt.auth, cfg(tt.list)))
			got := strings.Contains(out.String(), "anonymous publishing") && strings.Contains(out.String(), "chat.#")
			if got != tt.want {
				t.Errorf("warning %q, want one naming chat.#: %v", out.String(), tt.want)
			}
		})
	}
	if len(anon.Anonymous.Publish) != 0 {
		t.Errorf("the grants given were modified: %v", anon.Anonymous.Publish)
	}
}

// TestConfigTopicPolicyErrors: a bad value of the router's settings of an
// entry is refused by --check-config with its line and what it takes.
func TestConfigTopicPolicyErrors(t *testing.T) {
	for _, tt := range []struct {
		name, yaml string
		want       []string
	}{
		{"max_last zero", "topics:\n  - pattern: a.#\n    max_last: 0\n", []string{"line 3", "max_last: expected an integer from 1 to 1000000, got"}},
		{"max_last word", "topics:\n  - pattern: a.#\n    max_last: many\n", []string{"line 3", "max_last: expected an integer"}},
		{"presence", "topics:\n  - pattern: a.#\n    presence: maybe\n", []string{"line 3", "presence: expected true or false"}},
		{"anonymous scalar", "topics:\n  - pattern: a.#\n    anonymous: yes\n", []string{"line 3", "anonymous: expected a mapping of publish, subscribe"}},
		{"anonymous key", "topics:\n  - pattern: a.#\n    anonymous:\n      publsh: true\n", []string{"line 4", "anonymous.publsh: expected one of publish, subscribe"}},
		{"mqtt retained", "topics:\n  - pattern: a.#\n    mqtt: {retained: 1}\n", []string{"line 3", "mqtt.retained: expected true or false"}},
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
}
