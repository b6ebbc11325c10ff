package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// TestComposeFile checks docker-compose.yml: three gateways on JetStream
// with health checks and distinct ports and three replicas of every stream,
// a three-node NATS cluster, and
// Prometheus scraping every gateway. (No Docker engine runs in CI, so the
// file is checked as data.)
func TestComposeFile(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Build       any               `yaml:"build"`
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
			Healthcheck *struct {
				Test []string `yaml:"test"`
			} `yaml:"healthcheck"`
			DependsOn any      `yaml:"depends_on"`
			Secrets   []string `yaml:"secrets"`
		} `yaml:"services"`
		Secrets map[string]struct {
			File string `yaml:"file"`
		} `yaml:"secrets"`
		Configs map[string]struct {
			File string `yaml:"file"`
		} `yaml:"configs"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	ports := map[string]bool{}
	for _, name := range []string{"gateway-1", "gateway-2", "gateway-3"} {
		t.Run(name, func(t *testing.T) {
			s, ok := doc.Services[name]
			if !ok {
				t.Fatal("missing")
			}
			if s.Build == nil {
				t.Error("not built from the Dockerfile")
			}
			env := s.Environment
			if env["SWITCHYARD_ENGINE"] != "nats" {
				t.Errorf("SWITCHYARD_ENGINE = %q", env["SWITCHYARD_ENGINE"])
			}
			for _, n := range []string{"nats-1", "nats-2", "nats-3"} {
				if !strings.Contains(env["SWITCHYARD_NATS_URL"], n+":4222") {
					t.Errorf("SWITCHYARD_NATS_URL %q lacks %s", env["SWITCHYARD_NATS_URL"], n)
				}
			}
			if env["SWITCHYARD_NATS_PREFIX"] == "" {
				t.Error("no shared NATS prefix")
			}
			if env["SWITCHYARD_NATS_REPLICAS"] != "3" {
				t.Errorf("SWITCHYARD_NATS_REPLICAS = %q, want 3 (one per NATS server)", env["SWITCHYARD_NATS_REPLICAS"])
			}
			if s.Healthcheck == nil || !slices.Contains(s.Healthcheck.Test, "--healthcheck") {
				t.Errorf("healthcheck = %+v", s.Healthcheck)
			}
			if len(s.Ports) != 1 || !strings.HasSuffix(s.Ports[0], ":8080") || ports[s.Ports[0]] {
				t.Fatalf("ports = %v", s.Ports)
			}
			ports[s.Ports[0]] = true
			// Keys come from files given as Docker secrets, and every
			// *_FILE setting names a secret the service gets.
			for _, k := range []string{"SWITCHYARD_ADMIN_KEY_FILE", "SWITCHYARD_JWT_HMAC_SECRET_FILE"} {
				secret, ok := strings.CutPrefix(env[k], "/run/secrets/")
				if !ok || !slices.Contains(s.Secrets, secret) || doc.Secrets[secret].File == "" {
					t.Errorf("%s = %q, want /run/secrets/NAME of a secret the service gets (secrets %v)", k, env[k], s.Secrets)
				}
			}
			// Every environment variable names a real flag.
			fs := newFlagSet(&config{}, nil)
			for k := range env {
				flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "SWITCHYARD_")), "_", "-")
				if fs.Lookup(flag) == nil {
					t.Errorf("%s is not a gateway setting", k)
				}
			}
		})
	}
	// Nothing is published beyond loopback.
	for name, s := range doc.Services {
		for _, p := range s.Ports {
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("%s publishes %q beyond loopback", name, p)
			}
		}
	}
	for _, name := range []string{"nats-1", "nats-2", "nats-3"} {
		s := doc.Services[name]
		cmd := strings.Join(s.Command, " ")
		for _, want := range []string{"-js", "--cluster_name switchyard", "--routes"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("%s command %q lacks %q", name, cmd, want)
			}
		}
		if s.Healthcheck == nil {
			t.Errorf("%s has no healthcheck", name)
		}
	}
	// Every config file exists, and Prometheus scrapes every gateway.
	for name, c := range doc.Configs {
		if _, err := os.Stat(filepath.Join("../..", c.File)); err != nil {
			t.Errorf("config %s: %v", name, err)
		}
	}
	promFile, err := os.ReadFile(filepath.Join("../..", doc.Configs["prometheus"].File))
	if err != nil {
		t.Fatal(err)
	}
	prom := string(promFile)
	if !strings.Contains(prom, "/etc/prometheus/alerts.yml") || doc.Configs["alerts"].File != "./deploy/prometheus/alerts.yml" {
		t.Error("prometheus does not load deploy/prometheus/alerts.yml")
	}
	if _, ok := doc.Services["grafana"]; !ok || doc.Configs["grafana-dashboard"].File != "./deploy/grafana/switchyard.json" {
		t.Error("grafana does not get deploy/grafana/switchyard.json")
	}
	for _, g := range []string{"gateway-1:8080", "gateway-2:8080", "gateway-3:8080"} {
		if !strings.Contains(prom, g) {
			t.Errorf("prometheus does not scrape %s", g)
		}
	}
	if _, ok := doc.Services["prometheus"]; !ok {
		t.Error("no prometheus service")
	}
	if _, err := os.Stat("../../Dockerfile"); err != nil {
		t.Errorf("Dockerfile: %v", err)
	}
}

func TestHealthcheck(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer ok.Close()
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer down.Close()
	if err := healthcheck(ok.URL); err != nil {
		t.Errorf("healthy: %v", err)
	}
	if err := healthcheck(down.URL); err == nil {
		t.Error("unhealthy gateway passed")
	}
}

// TestDockerfile checks the image as data (no Docker engine runs in CI):
// the embedded engine's files on a volume at the data directory, a
// non-root user, a health check the image can run without a shell, every
// environment variable a setting, and a .dockerignore that keeps the
// repository's history and tests out of the build context but not what
// the build needs.
func TestDockerfile(t *testing.T) {
	data, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	// The final stage: from its FROM on, with continued lines joined.
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	final := text[strings.LastIndex(text, "\nFROM "):]
	env := map[string]string{}
	var volume, user, healthcheck string
	for _, line := range strings.Split(final, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || strings.HasPrefix(f[0], "#") {
			continue
		}
		rest := strings.TrimSpace(strings.TrimPrefix(line, f[0]))
		switch f[0] {
		case "ENV":
			for _, kv := range f[1:] {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		case "VOLUME":
			volume = rest
		case "USER":
			user = rest
		case "HEALTHCHECK":
			healthcheck = rest
		}
	}
	fs := newFlagSet(&config{}, nil)
	for k := range env {
		flag := strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "SWITCHYARD_")), "_", "-")
		if !strings.HasPrefix(k, "SWITCHYARD_") || fs.Lookup(flag) == nil {
			t.Errorf("ENV %s is not a gateway setting", k)
		}
	}
	if env["SWITCHYARD_ENGINE"] != "embedded" || env["SWITCHYARD_DATA_DIR"] == "" || volume != env["SWITCHYARD_DATA_DIR"] {
		t.Errorf("engine %q, data dir %q, VOLUME %q: want the embedded engine's data directory a volume",
			env["SWITCHYARD_ENGINE"], env["SWITCHYARD_DATA_DIR"], volume)
	}
	if !strings.Contains(final, "--chown=nonroot:nonroot /out/data "+volume) {
		t.Errorf("the volume %s is not made owned by the gateway's user", volume)
	}
	if user == "" || strings.HasPrefix(user, "root") || strings.HasPrefix(user, "0") {
		t.Errorf("USER %q, want a non-root user", user)
	}
	// HEALTHCHECK [options] CMD ["/gateway", "--healthcheck", URL]: the
	// exec form (distroless has no shell) of the gateway's own probe, on
	// the address the image listens on.
	_, cmd, ok := strings.Cut(healthcheck, "CMD ")
	var argv []string
	if !ok || json.Unmarshal([]byte(cmd), &argv) != nil || len(argv) != 3 ||
		argv[0] != "/gateway" || argv[1] != "--healthcheck" {
		t.Fatalf("HEALTHCHECK %q, want CMD [\"/gateway\", \"--healthcheck\", URL]", healthcheck)
	}
	u, err := url.Parse(argv[2])
	if err != nil || u.Path != "/readyz" || ":"+u.Port() != env["SWITCHYARD_ADDR"] || u.Hostname() != "127.0.0.1" {
		t.Errorf("health check URL %q, want http://127.0.0.1%s/readyz", argv[2], env["SWITCHYARD_ADDR"])
	}

	ignore, err := os.ReadFile("../../.dockerignore")
	if err != nil {
		t.Fatal(err)
	}
	patterns := strings.Fields(string(ignore))
	for _, want := range []string{".git", "**/*_test.go", "**/testdata", "**/node_modules"} {
		if !slices.Contains(patterns, want) {
			t.Errorf(".dockerignore does not leave out %s", want)
		}
	}
	for _, need := range []string{"go.mod", "go.sum", "cmd/gateway/main.go", "web/static/index.html", "router/http.go"} {
		for _, p := range patterns {
			if p == "#" || strings.HasPrefix(p, "!") {
				continue
			}
			if m, _ := filepath.Match(strings.TrimPrefix(strings.TrimPrefix(p, "/"), "**/"), need); m || strings.HasPrefix(need, strings.TrimPrefix(p, "/")+"/") {
				t.Errorf(".dockerignore %q leaves out %s, which the build needs", p, need)
			}
		}
	}
}

// TestSystemdUnit checks deploy/systemd/switchyard.service: the hardening
// keys, the data directory in the unit's state directory, the keys as
// credentials, and arguments the gateway takes. Where systemd-analyze is
// installed, it verifies the unit and rates its exposure.
func TestSystemdUnit(t *testing.T) {
	const path = "../../deploy/systemd/switchyard.service"
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string][]string{} // section.key: values
	section := ""
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = strings.Trim(line, "[]")
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok {
				t.Fatalf("line %q is not key=value", line)
			}
			keys[section+"."+k] = append(keys[section+"."+k], v)
		}
	}
	for k, want := range map[string]string{
		"NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
		"ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes", "PrivateDevices": "yes",
		"DynamicUser": "yes", "StateDirectory": "switchyard", "RestrictSUIDSGID": "yes",
		"ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectControlGroups": "yes",
		"MemoryDenyWriteExecute": "yes", "LockPersonality": "yes", "RestrictNamespaces": "yes",
	} {
		if got := keys["Service."+k]; len(got) != 1 || got[0] != want {
			t.Errorf("%s=%v, want %q", k, got, want)
		}
	}
	if got := keys["Install.WantedBy"]; !slices.Equal(got, []string{"multi-user.target"}) {
		t.Errorf("WantedBy=%v", got)
	}
	exec := strings.Fields(strings.Join(keys["Service.ExecStart"], " "))
	if len(exec) < 2 {
		t.Fatalf("ExecStart=%v", exec)
	}
	// The arguments are the gateway's flags; with systemd's specifiers
	// filled in (%S the state root, %d the credentials), it loads them.
	args := strings.NewReplacer("%S", "/var/lib", "%d", "/run/credentials/switchyard.service").Replace(strings.Join(exec[1:], " "))
	cfg, err := loadConfig(strings.Fields(args), func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("ExecStart arguments: %v", err)
	}
	if err := validate(cfg); err != nil {
		t.Errorf("ExecStart arguments: %v", err)
	}
	if cfg.Engine != "embedded" || cfg.DataDir != "/var/lib/"+keys["Service.StateDirectory"][0] {
		t.Errorf("engine %q in %q, want embedded in the StateDirectory", cfg.Engine, cfg.DataDir)
	}
	if host, _, _ := net.SplitHostPort(cfg.Addr); host != "127.0.0.1" {
		t.Errorf("--addr %q, want loopback", cfg.Addr)
	}
	creds := map[string]bool{}
	for _, c := range keys["Service.LoadCredential"] {
		name, _, _ := strings.Cut(c, ":")
		creds[name] = true
	}
	for _, f := range []string{cfg.Keys.AdminKeyFile, cfg.Keys.HMACSecretFile} {
		if dir, name := filepath.Split(f); dir != "/run/credentials/switchyard.service/" || !creds[name] {
			t.Errorf("key file %q is not a LoadCredential", f)
		}
	}
	stop, err := time.ParseDuration(keys["Service.TimeoutStopSec"][0])
	if err != nil || stop <= cfg.ShutdownTimeout {
		t.Errorf("TimeoutStopSec=%v, want more than --shutdown-timeout %v", keys["Service.TimeoutStopSec"], cfg.ShutdownTimeout)
	}

	analyze, err := osexec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: unit checked as data only")
		return
	}
	// verify wants the executable to exist: the unit with ExecStart on
	// this test's binary.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unit := filepath.Join(t.TempDir(), "switchyard.service")
	if err := os.WriteFile(unit, []byte(strings.Replace(string(data), "ExecStart="+exec[0], "ExecStart="+self, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on unknown keys, warning about them: any output fails.
	if out, err := osexec.Command(analyze, "verify", unit).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	// Exposure is rated 0 (none) to 10 (none of the sandboxing); the
	// threshold is in tenths.
	if out, err := osexec.Command(analyze, "security", "--offline=true", "--threshold=15", unit).CombinedOutput(); err != nil {
		t.Errorf("systemd-analyze security: exposure above 1.5: %v\n%s", err, out)
	}
}

// TestGrafanaDashboard checks deploy/grafana/switchyard.json: no panel,
// query or variable pins a data source uid (each uses the datasource
// variable), and every query is narrowed to the job and instance
// variables, so that the dashboard imports into any Grafana and shows any
// one gateway.
func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("../../deploy/grafana/switchyard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name  string `json:"name"`
				Type  string `json:"type"`
				Query any    `json:"query"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			ID      int    `json:"id"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
	}
	if vars["datasource"] != "datasource" || vars["instance"] != "query" || vars["job"] != "query" {
		t.Errorf("variables %v, want datasource (a data source variable), job and instance", vars)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "datasource" {
					checkDatasource(t, path+".datasource", e)
				}
				walk(path+"."+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", path, i), e)
			}
		}
	}
	walk("", doc)
	metric := regexp.MustCompile(`\b(switchyard_[a-z_]+|up)(\{[^}]*\})?`)
	var queries int
	for _, p := range dash.Panels {
		for _, q := range p.Targets {
			queries++
			for _, m := range metric.FindAllStringSubmatch(q.Expr, -1) {
				if !strings.Contains(m[2], `instance=~"$instance"`) || !strings.Contains(m[2], `job=~"$job"`) {
					t.Errorf("panel %d %q: %s is not narrowed to $job and $instance", p.ID, p.Title, m[0])
				}
			}
		}
	}
	if queries == 0 {
		t.Error("no queries")
	}
}

// checkDatasource fails a data source reference that is not a variable.
func checkDatasource(t *testing.T, path string, ds any) {
	t.Helper()
	switch ds := ds.(type) {
	case string:
		if !strings.HasPrefix(ds, "$") {
			t.Errorf("%s = %q, want a variable", path, ds)
		}
	case map[string]any:
		if uid, ok := ds["uid"].(string); ok && !strings.HasPrefix(uid, "$") {
			t.Errorf("%s pins uid %q, want ${datasource}", path, uid)
		}
	}
}
