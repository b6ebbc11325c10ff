package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/session"
)

// noEnv is an empty environment.
func noEnv(string) string { return "" }

// TestFlagDefaults: every setting's default, as loaded into the option
// struct it is bound to, is its owning package's Default* constant. The
// settings come from the registry, so a new setting fails this test until
// it has a row here.
func TestFlagDefaults(t *testing.T) {
	d, p := engine.Defaults, engine.DefaultGroupPolicy
	want := map[string]any{
		// Server.
		"config":             "",
		"addr":               defaultAddr,
		"allowed-origins":    []string(nil),
		"trusted-proxies":    []*net.IPNet(nil),
		"handshake-timeout":  router.DefaultReadHeaderTimeout,
		"read-timeout":       router.DefaultReadTimeout,
		"write-timeout":      router.DefaultWriteTimeout,
		"idle-timeout":       router.DefaultIdleTimeout,
		"shutdown-timeout":   defaultShutdownTimeout,
		"ping-interval":      session.DefaultPingInterval,
		"compression":        false,
		"write-delay":        time.Duration(0), // off
		"write-delay-frames": session.DefaultWriteDelayFrames,
		"idle-park":          false, // NoIdlePark: on
		"version":            false,
		"check-config":       false,
		"print-config":       false,
		// TLS.
		"tls-cert":            "",
		"tls-key":             "",
		"tls-client-ca":       "",
		"tls-reload-interval": defaultTLSReloadInterval,
		// Engine.
		"engine":               defaultEngine,
		"nats-url":             nats.DefaultURL,
		"nats-prefix":          jsengine.DefaultPrefix,
		"nats-replicas":        defaultNATSReplicas,
		"data-dir":             defaultDataDir,
		"data-sync":            defaultDataSync,
		"embedded-nats-listen": "",
		"strict":               false,
		// Auth.
		"jwt-hmac-secret":      "",
		"jwt-hmac-secret-file": "",
		"jwt-public-key":       "",
		"jwt-audience":         "",
		"jwt-issuer":           "",
		"jwt-jwks-url":         "",
		"jwt-jwks-file":        "",
		"jwt-jwks-refresh":     router.DefaultJWKSRefresh,
		"jwt-claims-prefix":    "",
		"jwt-claims":           "",
		"jwt-refresh-lead":     time.Duration(0), // the router's rule: 30s or a tenth of the lifetime
		"admin-key":            "",
		"admin-key-file":       "",
		"allow-anonymous":      false,
		"anonymous-subscribe":  []string{"#", "$sys.#"},
		"anonymous-publish":    []string(nil),
		// Hooks.
		"hook-url":                   "",
		"hooks":                      defaultHooks,
		"hook-timeout":               router.DefaultHookTimeout,
		"hook-fail-open":             false,
		"hook-headers":               []string(nil),
		"hook-cookies":               []string(nil),
		"hook-max-concurrent":        router.DefaultHookMaxConcurrent,
		"hook-max-concurrent-per-ip": 0, // the router's rule: a quarter of hook-max-concurrent
		"hook-cache-entries":         router.DefaultHookCacheEntries,
		"hook-cache-bytes":           router.DefaultHookCacheBytes,
		// Limits.
		"queue-messages":            session.DefaultQueueMessages,
		"control-queue-bytes":       session.DefaultControlBytes,
		"message-timeout":           session.DefaultMessageTimeout,
		"max-frame-bytes":           0, // the router's rule: max-message-bytes plus the envelope
		"max-message-bytes":         router.DefaultMaxMessageBytes,
		"max-inbound-partial-bytes": router.DefaultMaxInboundPartialBytes,
		"max-subscriptions":         router.DefaultMaxSubscriptions,
		"max-last":                  router.DefaultMaxLast,
		"publish-rate":              0, // unlimited
		"publish-pipeline":          router.DefaultPublishPipeline,
		"publish-pipeline-bytes":    router.DefaultPublishPipelineBytes,
		"max-connections":           0, // unlimited
		"max-connections-per-ip":    0,
		"connect-rate-per-ip":       0,
		"http-publish-rate":         0,
		"max-publish-batch":         router.DefaultMaxPublishBatch,
		"max-publish-batch-bytes":   router.DefaultMaxPublishBatchBytes,
		"max-topics":                0,
		"max-partitions":            engine.MaxPartitions,
		"max-topic-bytes":           router.DefaultMaxTopicBytes,
		"max-topic-depth":           router.DefaultMaxTopicDepth,
		"max-key-bytes":             router.DefaultMaxKeyBytes,
		"max-msg-id-bytes":          router.DefaultMaxMsgIDBytes,
		"max-headers":               router.DefaultMaxHeaders,
		"max-header-bytes":          router.DefaultMaxHeaderBytes,
		"max-filter-headers":        router.DefaultMaxFilterHeaders,
		"max-filter-bytes":          router.DefaultMaxFilterBytes,
		"max-session-filter-bytes":  router.DefaultMaxSessionFilterBytes,
		"max-id-bytes":              router.DefaultMaxIDBytes,
		"delta-max-partitions":      router.DefaultMaxDeltaPartitions,
		"delta-max-bases":           router.DefaultMaxDeltaBases,
		"delta-max-base-bytes":      router.DefaultMaxDeltaBaseBytes,
		"max-presence-per-topic":    router.DefaultMaxPresencePerTopic,
		"presence-join-rate":        router.DefaultPresenceJoinRate,
		"presence-join-burst":       router.DefaultPresenceJoinBurst,
		"presence-queue-bytes":      router.DefaultPresenceQueueBytes,
		"sse-max-positions":         router.DefaultSSEMaxPositions,
		"sse-max-token-bytes":       router.DefaultSSEMaxTokenBytes,
		"sse-resume-ttl":            router.DefaultSSEResumeTTL,
		"sse-resume-bytes":          router.DefaultSSEResumeBytes,
		"ticket-ttl":                router.DefaultTicketTTL,
		"max-tickets":               router.DefaultMaxTickets,
		"max-ticket-bytes":          router.DefaultMaxTicketBytes,
		// Groups.
		"ack-timeout":                 p.AckTimeout,
		"max-attempts":                p.MaxAttempts,
		"backoff-min":                 p.BackoffMin,
		"backoff-max":                 p.BackoffMax,
		"max-in-flight":               p.MaxInFlight,
		"dedupe-window":               p.DedupeWindow,
		"group-idle-ttl":              p.IdleTTL,
		"max-pull-members":            router.DefaultMaxPullMembers,
		"max-pull-members-per-client": router.DefaultMaxPullMembersPerClient,
		"max-session-leases":          0, // the router's rule: 4 × queue-messages
		"max-session-lease-bytes":     router.DefaultMaxSessionLeaseBytes,
		"max-groups":                  router.DefaultMaxGroups,
		"mqtt-addr":                   "",
		"mqtt-max-packet-bytes":       0,
		"mqtt-max-in-flight":          router.DefaultMQTTMaxInFlight,
		"mqtt-max-client-id-bytes":    router.DefaultMQTTMaxClientIDBytes,
		"mqtt-connect-timeout":        router.DefaultMQTTConnectTimeout,
		"mqtt-max-held-bytes":         router.DefaultMQTTMaxHeldBytes,
		"mqtt-max-retained":           router.DefaultMQTTMaxRetained,
		"mqtt-max-pending-wills":      router.DefaultMQTTMaxPendingWills,
		"mqtt-max-retained-bytes":     int64(router.DefaultMQTTMaxRetainedBytes),
		"mqtt-max-sessions":           router.DefaultMQTTMaxSessions,
		"mqtt-max-session-bytes":      int64(router.DefaultMQTTMaxSessionBytes),
		"mqtt-max-session-expiry":     router.DefaultMQTTMaxSessionExpiry,
		"mqtt-max-topic-aliases":      router.DefaultMQTTMaxTopicAliases,
		"max-group-bytes":             router.DefaultMaxGroupBytes,
		"max-groups-per-client":       router.DefaultMaxGroupsPerClient,
		"max-group-bytes-per-client":  router.DefaultMaxGroupBytesPerClient,
		"max-group-dead-letters":      p.MaxGroupDeadLetters,
		"max-dead-letters":            p.MaxDeadLetters,
		"max-dead-letter-bytes":       p.MaxDeadLetterBytes,
		"dead-letter-rate":            router.DefaultDeadLetterRate,
		"dead-letter-burst":           router.DefaultDeadLetterBurst,
		// Topic aliases the gateway gives.
		"mqtt-max-sent-topic-aliases":     router.DefaultMQTTMaxSentTopicAliases,
		"mqtt-max-sent-topic-alias-bytes": router.DefaultMQTTMaxSentTopicAliasBytes,
		// Retention.
		"partitions":         d.Partitions,
		"retention-messages": d.MaxMessages,
		"retention-age":      d.MaxAge,
		"on-full":            string(d.OnFull),
		"block-timeout":      d.BlockTimeout,
		// Observability.
		"log-level":      defaultLogLevel,
		"log-json":       false,
		"stats-interval": router.DefaultStatsInterval,
		"debug-addr":     "",
	}
	cfg, err := loadConfig(nil, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r := newRegistry(&cfg) // bound to the loaded config; does not reset it
	for _, s := range r.settings {
		t.Run(s.name, func(t *testing.T) {
			w, ok := want[s.name]
			if !ok {
				t.Fatalf("no expected default: add a row with the owning package's Default* constant")
			}
			// Untyped constants become int; compare as the values print.
			if got := s.value.Get(); fmt.Sprint(got) != fmt.Sprint(w) {
				t.Errorf("default %v, want %v", got, w)
			}
			if s.def != s.value.String() {
				t.Errorf("--help says default %q, the field holds %q", s.def, s.value.String())
			}
		})
	}
	for name := range want {
		if r.byName[name] == nil {
			t.Errorf("a row for %s, which is no setting: remove it", name)
		}
	}
}

// TestSettingsReachOptions: a value given for a setting lands in the option
// struct the gateway hands on.
func TestSettingsReachOptions(t *testing.T) {
	cfg, err := loadConfig([]string{
		"--queue-messages", "7", "--max-topic-bytes", "100", "--stats-interval", "3s",
		"--allowed-origins", "a.example, b.example", "--trusted-proxies", "10.0.0.0/8",
		"--hook-url", "http://127.0.0.1:1", "--hooks", "publish", "--hook-timeout", "1s",
		"--handshake-timeout", "4s", "--group-idle-ttl", "0", "--compression", "on",
		"--idle-park", "off",
	}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o, err := routerOptions(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	hooks := o.Hooks
	for _, tt := range []struct {
		name      string
		got, want any
	}{
		{"session", o.Session.QueueMessages, 7},
		{"idle park", o.Session.NoIdlePark, true},
		{"bounds", o.Bounds.MaxTopicBytes, 100},
		{"router", o.StatsInterval.String(), "3s"},
		{"list", o.OriginPatterns, []string{"a.example", "b.example"}},
		{"networks", fmt.Sprint(o.TrustedProxies), "[10.0.0.0/8]"},
		{"hooks", [3]bool{hooks.Connect, hooks.Subscribe, hooks.Publish}, [3]bool{false, false, true}},
		{"hook timeout", hooks.Timeout.String(), "1s"},
		{"switch", o.Compression, true},
		{"server", cfg.HTTP.ReadHeaderTimeout.String(), "4s"},
		{"keep groups", groupPolicy(cfg).IdleTTL < 0, true},
		{"shutdown grace", o.ShutdownGrace, defaultShutdownTimeout / 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if fmt.Sprint(tt.got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

// writeConfig writes a config file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "gateway.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestConfigFileTypeErrors: an error in the config file names the line,
// the key and what the key takes; the environment and the command line
// name theirs likewise.
func TestConfigFileTypeErrors(t *testing.T) {
	for _, tt := range []struct {
		name, file string
		want       []string
	}{
		{"duration", "addr: 127.0.0.1:0\nack-timeout: soon\n", []string{"line 2: ack-timeout: expected a duration", `got "soon"`}},
		{"integer", "queue-messages: lots\n", []string{"line 1: queue-messages: expected an integer", `got "lots"`}},
		{"out of range", "max-connections: \"99999999999999999999\"\n", []string{"max-connections: out of range", "an integer"}},
		{"number", "publish-rate: fast\n", []string{"publish-rate: expected a number"}},
		{"switch", "log-json: maybe\n", []string{"log-json: expected true or false"}},
		{"off or on", "compression: yes\n", []string{`compression: expected "off" or "on"`}},
		{"networks", "trusted-proxies: 10.0.0.0/99\n", []string{"trusted-proxies: expected comma-separated CIDRs"}},
		{"list for an integer", "max-attempts: [1, 2]\n", []string{"max-attempts: expected an integer, got a list"}},
		{"mapping for a string", "addr:\n  host: x\n", []string{"addr: expected a string, got a mapping"}},
		{"no value", "engine:\n", []string{"line 1: engine: expected a string, got no value"}},
		{"twice", "max-attempts: 3\nmax-attempts: 4\n", []string{"line 2: max-attempts: given twice (first on line 1)"}},
		{"unknown", "# settings\nno-such-setting: 1\n", []string{`line 2: unknown setting "no-such-setting"`}},
		{"underscores", "admin_key: 0123456789abcdef\n", []string{`unknown setting "admin_key": the settings are the flag names, did you mean "admin-key"?`}},
		{"misspelt", "max-atempts: 3\n", []string{`unknown setting "max-atempts": did you mean "max-attempts"?`}},
		{"not a mapping", "- addr\n", []string{"expected settings as name: value lines, got a list"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := writeConfig(t, tt.file)
			_, err := loadConfig([]string{"--config", path}, noEnv, io.Discard)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range append(tt.want, path) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	env := map[string]string{"SWITCHYARD_MAX_ATTEMPTS": "many"}
	_, err := loadConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), `SWITCHYARD_MAX_ATTEMPTS="many": expected an integer`) {
		t.Errorf("environment: %v", err)
	}
	_, err = loadConfig([]string{"--block-timeout", "1 second"}, noEnv, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "block-timeout") || !strings.Contains(err.Error(), "expected a duration") {
		t.Errorf("flag: %v", err)
	}
}

// TestConfigFileValues: the YAML forms a file may use for each type, and
// files with no settings.
func TestConfigFileValues(t *testing.T) {
	path := writeConfig(t, `# A gateway.
dead-letter-rate: .inf
retention-messages: 1e3
max-frame-bytes: 0x100
log-json: true
compression: "on"
allowed-origins: a.example,b.example
retention-age: 90s
on-full: block
hook-fail-open: false
`)
	cfg, err := loadConfig([]string{"--config", path}, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DeadLetterRate < 1e300 || cfg.Topics.MaxMessages != 1000 || cfg.ReadLimit != 256 || !cfg.LogJSON ||
		!cfg.Router.Compression || !slices.Equal(cfg.Router.OriginPatterns, []string{"a.example", "b.example"}) ||
		cfg.Topics.MaxAge.String() != "1m30s" || cfg.Topics.OnFull != engine.Block {
		t.Errorf("loaded %+v", cfg)
	}
	for _, text := range []string{"", "# nothing set\n", "---\n"} {
		if _, err := loadConfig([]string{"--config", writeConfig(t, text)}, noEnv, io.Discard); err != nil {
			t.Errorf("%q: %v", text, err)
		}
	}
}

// TestConfigSources: each setting's source is recorded, for --print-config
// and reload.
func TestConfigSources(t *testing.T) {
	path := writeConfig(t, "max-attempts: 9\nmax-topics: 3\nmax-last: 5\n")
	env := map[string]string{"SWITCHYARD_CONFIG": path, "SWITCHYARD_MAX_TOPICS": "4", "SWITCHYARD_MAX_LAST": "6"}
	cfg, err := loadConfig([]string{"--max-last", "7"}, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]source{"config": fromEnv, "max-attempts": fromFile, "max-topics": fromEnv, "max-last": fromFlag, "addr": ""} {
		if got := cfg.sources[name]; got != want {
			t.Errorf("%s from %q, want %q", name, got, want)
		}
	}
	if cfg.MaxAttempts != 9 || cfg.Router.MaxTopics != 4 || cfg.Router.MaxLast != 7 {
		t.Errorf("max-attempts %d, max-topics %d, max-last %d", cfg.MaxAttempts, cfg.Router.MaxTopics, cfg.Router.MaxLast)
	}
}

// TestValidate: validate refuses settings that contradict each other or
// cannot work, naming them, and accepts the defaults.
func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{"defaults", nil, nil},
		{"partitions above their bound", []string{"--partitions", "8", "--max-partitions", "4"}, []string{"partitions (8) is above max-partitions (4)"}},
		{"max partitions", []string{"--max-partitions", "0"}, []string{"max-partitions must be 1 to 1024"}},
		{"listen without embedded", []string{"--embedded-nats-listen", "127.0.0.1:4223"}, []string{"embedded-nats-listen needs --engine embedded"}},
		{"sync without embedded", []string{"--engine", "nats", "--data-sync", "2m"}, []string{"data-sync needs --engine embedded"}},
		{"replicas without a cluster", []string{"--nats-replicas", "3"}, []string{"nats-replicas above 1 needs --engine nats"}},
		{"embedded without a directory", []string{"--engine", "embedded", "--data-dir", ""}, []string{"data-dir must be set for --engine embedded"}},
		{"unknown engine", []string{"--engine", "disk"}, []string{`engine must be "memory", "embedded" or "nats", not "disk"`}},
		{"unknown hook", []string{"--hook-url", "http://127.0.0.1:1", "--hooks", "connect,bogus"}, []string{`hooks: unknown hook "bogus"`}},
		{"claims", []string{"--jwt-claims", "publish"}, []string{`jwt-claims: "publish" is not name=claim`}},
		{"timeouts", []string{"--idle-timeout", "0s"}, []string{"read-timeout, write-timeout and idle-timeout must be positive"}},
		{"topic defaults", []string{"--on-full", "wait"}, []string{"topic defaults", "on_full"}},
		{"log level", []string{"--log-level", "loud"}, []string{"log-level"}},
		{"every error at once", []string{"--nats-replicas", "2", "--handshake-timeout", "0s", "--log-level", "loud"},
			[]string{"nats-replicas above 1", "handshake-timeout must be positive", "log-level"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := loadConfig(tt.args, noEnv, io.Discard)
			if err != nil {
				t.Fatal(err)
			}
			err = validate(cfg)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

// TestHelpGroups: --help lists every setting once, under its subject's
// heading, the headings in order.
func TestHelpGroups(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"--help"}, noEnv, &out, nil)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run --help: %v", err)
	}
	help := out.String()
	at := 0
	for g := range numGroups {
		i := strings.Index(help, "\n"+g.title()+"\n")
		if i < at {
			t.Fatalf("heading %q missing or out of order in\n%s", g.title(), help)
		}
		at = i
	}
	var cfg config
	r := newRegistry(&cfg)
	for _, s := range r.settings {
		if strings.Count(help, "\n  --"+s.name+" ")+strings.Count(help, "\n  --"+s.name+"\n") != 1 {
			t.Errorf("--%s is not listed once", s.name)
			continue
		}
		i := strings.Index(help, "\n  --"+s.name)
		if heading := lastHeading(help[:i]); heading != s.group.title() {
			t.Errorf("--%s is under %q, want %q", s.name, heading, s.group.title())
		}
	}
	if flat := strings.Join(strings.Fields(help), " "); !strings.Contains(flat, `(default ":8080")`) || !strings.Contains(flat, "(default 1024)") {
		t.Errorf("defaults not shown:\n%s", help)
	}
	// The settings a reload changes live say so, and only they.
	for _, s := range r.settings {
		i := strings.Index(help, "\n  --"+s.name)
		next := strings.Index(help[i+1:], "\n  --")
		if next < 0 {
			next = len(help) - i - 1
		}
		entry := strings.Join(strings.Fields(help[i:i+1+next]), " ")
		if got := strings.Contains(entry, "[reloads live]"); got != s.live {
			t.Errorf("--%s: [reloads live] shown %v, live %v", s.name, got, s.live)
		}
	}
}

// lastHeading returns the last group heading in help.
func lastHeading(help string) string {
	lines := strings.Split(help, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		for g := range numGroups {
			if lines[i] == g.title() {
				return lines[i]
			}
		}
	}
	return ""
}
