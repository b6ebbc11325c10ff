package web

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

func TestFSServesTheFiles(t *testing.T) {
	for _, name := range []string{"index.html", "dashboard.js", "dashboard_ui.js", "dashboard_api.js", "dashboard_panels.js", "dashboard.css", "eventstream.js", "example.html", "switchyard.js", "sse_transport.js", "client_base.js", "client_frames.js", "subscription.js"} {
		t.Run(name, func(t *testing.T) {
			b, err := fs.ReadFile(FS(), name)
			if err != nil {
				t.Fatalf("ReadFile: %v", err)
			}
			if len(b) == 0 {
				t.Fatal("empty file")
			}
		})
	}
}

var idAttr = regexp.MustCompile(`\sid="([^"]+)"`)

// TestDashboardIDs pins the element ids that browser tests read.
func TestDashboardIDs(t *testing.T) {
	b, err := fs.ReadFile(FS(), "index.html")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	for _, m := range idAttr.FindAllStringSubmatch(string(b), -1) {
		seen[m[1]]++
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("id %q appears %d times", id, n)
		}
	}
	for _, id := range []string{
		"conn-state", "signin", "signin-form", "signin-key", "signin-submit", "signin-status", "signout",
		"info-node", "info-version", "info-engine", "info-epoch",
		"sessions", "sessions-prev", "sessions-next", "sessions-page", "sessions-status", "sessions-empty",
		"stat-uptime", "stat-connections", "stat-subs-plain", "stat-subs-group",
		"rate-publishes", "rate-deliveries", "rate-drops",
		"chart-publishes", "chart-deliveries", "chart-drops",
		"top-topics", "slow-consumers", "topics", "groups",
		"deadletters", "dl-redrive", "dl-refresh", "dl-group", "dl-append", "dl-hint",
		"tb-topic", "tb-partition", "tb-messages", "tb-prev", "tb-next",
		"try-pattern", "try-subscribe", "try-log", "try-topic", "try-key", "try-data", "try-publish", "try-result",
	} {
		if seen[id] == 0 {
			t.Errorf("index.html has no element with id %q", id)
		}
	}
}

// TestNothingFromElsewhere checks that no served file loads a script, style
// or image from another origin.
func TestNothingFromElsewhere(t *testing.T) {
	external := regexp.MustCompile(`(?i)(src|href)\s*=\s*["'](https?:)?//|@import\s+url\(\s*["']?(https?:)?//|from\s+["'](https?:)?//`)
	err := fs.WalkDir(FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(FS(), path)
		if err != nil {
			return err
		}
		if loc := external.FindIndex(b); loc != nil {
			t.Errorf("%s loads from another origin: %q", path, b[loc[0]:min(loc[1]+40, len(b))])
		}
		if strings.Contains(string(b), "innerHTML") {
			t.Errorf("%s uses innerHTML; build DOM nodes with textContent instead", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
