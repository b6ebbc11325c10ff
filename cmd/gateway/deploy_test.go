package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

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
			DependsOn any `yaml:"depends_on"`
		} `yaml:"services"`
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
				t.Errorf("ports = %v", s.Ports)
			}
			ports[s.Ports[0]] = true
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
