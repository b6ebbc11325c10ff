package web

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

var (
	jsExport  = regexp.MustCompile(`(?m)^export (?:async )?(?:function|class|const) ([A-Za-z_$][\w$]*)`)
	reExport  = regexp.MustCompile(`(?m)^export \{([^}]*)\} from `)
	dtsExport = regexp.MustCompile(`(?m)^export declare (?:function|class|const) ([A-Za-z_$][\w$]*)`)
)

func exportsOf(t *testing.T, path string, re *regexp.Regexp) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		names = append(names, m[1])
	}
	// Names a module re-exports from another: export { A, B } from "./x.js";
	for _, m := range reExport.FindAllStringSubmatch(string(b), -1) {
		for _, n := range strings.Split(m[1], ",") {
			if n = strings.TrimSpace(n); n != "" {
				names = append(names, n)
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// testOnlyExports are the helpers switchyard.js exports for its own tests;
// they are not the package's API, and switchyard.d.ts must not export them.
var testOnlyExports = []string{"AsyncQueue", "RecentSet", "backoffDelay", "buildURL", "splitFrame"}

// TestDeclarationsCoverExports checks that switchyard.d.ts declares every
// value of the public API switchyard.js exports, nothing it does not, and
// none of the helpers it exports for its tests.
func TestDeclarationsCoverExports(t *testing.T) {
	js := exportsOf(t, filepath.Join("static", "switchyard.js"), jsExport)
	dts := exportsOf(t, "switchyard.d.ts", dtsExport)
	if len(js) == 0 {
		t.Fatal("found no exports in switchyard.js")
	}
	b, err := os.ReadFile("switchyard.d.ts")
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`(?m)^export \{\};$`).Match(b) {
		t.Error("switchyard.d.ts lacks `export {};`: without it every top-level declaration is exported")
	}
	for _, name := range testOnlyExports {
		if !slices.Contains(js, name) {
			t.Errorf("switchyard.js no longer exports %s: drop it from testOnlyExports", name)
		}
		if slices.Contains(dts, name) || regexp.MustCompile(`(?m)^export .*\b`+name+`\b`).Match(b) {
			t.Errorf("switchyard.d.ts exports %s, a helper for tests, not the API", name)
		}
	}
	for _, name := range js {
		if slices.Contains(testOnlyExports, name) {
			continue
		}
		if !slices.Contains(dts, name) {
			t.Errorf("switchyard.js exports %s but switchyard.d.ts does not declare it", name)
		}
	}
	for _, name := range dts {
		if !slices.Contains(js, name) {
			t.Errorf("switchyard.d.ts declares %s but switchyard.js does not export it", name)
		}
	}
}

// TestPackageManifest checks that package.json points at the file the
// gateway serves, so there is one source of truth for the client.
func TestPackageManifest(t *testing.T) {
	b, err := os.ReadFile("package.json")
	if err != nil {
		t.Fatal(err)
	}
	var pkg struct {
		Name         string                     `json:"name"`
		Type         string                     `json:"type"`
		Exports      map[string]json.RawMessage `json:"exports"`
		Engines      map[string]string          `json:"engines"`
		Dependencies map[string]string          `json:"dependencies"`
		Files        []string                   `json:"files"`
		License      string                     `json:"license"`
	}
	if err := json.Unmarshal(b, &pkg); err != nil {
		t.Fatal(err)
	}
	if pkg.License != "Apache-2.0" {
		t.Errorf("license = %q, want Apache-2.0 (the LICENSE beside it)", pkg.License)
	}
	var dot map[string]string
	if err := json.Unmarshal(pkg.Exports["."], &dot); err != nil {
		t.Fatalf(`exports["."]: %v`, err)
	}
	if dot["import"] != "./static/switchyard.js" || dot["default"] != "./static/switchyard.js" {
		t.Errorf(`exports["."] = %v, want import and default ./static/switchyard.js (the served file)`, dot)
	}
	if dot["types"] != "./switchyard.d.ts" {
		t.Errorf(`exports["."].types = %q, want ./switchyard.d.ts`, dot["types"])
	}
	if pkg.Type != "module" {
		t.Errorf("type = %q, want module", pkg.Type)
	}
	if pkg.Engines["node"] == "" {
		t.Error("engines.node is not set")
	}
	if len(pkg.Dependencies) != 0 {
		t.Errorf("runtime dependencies %v, want none", pkg.Dependencies)
	}
	served, err := fs.ReadFile(FS(), "switchyard.js")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join("static", "switchyard.js"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(served, src) {
		t.Error("the served /switchyard.js differs from the package entry")
	}
}

// npm returns the path of npm, skipping the test when it is missing unless
// SWITCHYARD_REQUIRE_NPM is set (as CI does).
func npm(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("npm")
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_NPM") != "" {
			t.Fatal("npm not found and SWITCHYARD_REQUIRE_NPM is set")
		}
		t.Skip("npm not found")
	}
	return path
}

func run(t *testing.T, ctx context.Context, dir, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(ctx, dir, name, args...)
	if err != nil {
		t.Fatalf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return out
}

func tryRun(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "NO_COLOR=1", "npm_config_update_notifier=false")
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	return out.String(), err
}

// TestPackageInViteApp packs the client with npm, installs the tarball into
// a copy of testdata/vite-app (a fresh Vite project whose dev dependencies,
// vite, typescript, ws, @types/ws and @types/node, are pinned by its
// package-lock.json), type-checks the app's typed usage of the whole API
// with tsc --noEmit under strict, type-checks the README's Node example
// (node/example.ts: connect(url, { WebSocket }) with the ws package) under
// strict with tsconfig.node.json, builds the app with vite and imports the
// package from Node. It needs npm and
// the npm registry (or npm's cache); it skips when npm is missing and with
// -short.
func TestPackageInViteApp(t *testing.T) {
	npmPath := npm(t)
	if testing.Short() {
		t.Skip("installs packages with npm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tmp := t.TempDir()

	var packed []struct {
		Filename string `json:"filename"`
		Files    []struct {
			Path string `json:"path"`
		} `json:"files"`
	}
	out := run(t, ctx, ".", npmPath, "pack", "--json", "--pack-destination", tmp)
	if i := strings.Index(out, "["); i >= 0 {
		out = out[i:]
	}
	if err := json.Unmarshal([]byte(out), &packed); err != nil || len(packed) != 1 {
		t.Fatalf("npm pack --json: %v\n%s", err, out)
	}
	var files []string
	for _, f := range packed[0].Files {
		files = append(files, f.Path)
	}
	slices.Sort(files)
	want := []string{"LICENSE", "README.md", "package.json", "static/client_base.js", "static/client_frames.js", "static/eventstream.js", "static/fossil.js", "static/sse_transport.js", "static/subscription.js", "static/switchyard.js", "switchyard.d.ts"}
	if !slices.Equal(files, want) {
		t.Errorf("tarball holds %v, want %v", files, want)
	}

	app := filepath.Join(tmp, "app")
	src := filepath.Join("testdata", "vite-app")
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if d.IsDir() {
			if d.Name() == "node_modules" || d.Name() == "dist" {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(app, rel), 0o755)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(app, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}

	// npm's cache makes --prefer-offline fast, but cached metadata older
	// than the lock file's versions makes it fail; then ask the registry.
	quiet := []string{"--no-audit", "--no-fund"}
	if out, err := tryRun(ctx, app, npmPath, append([]string{"ci", "--prefer-offline"}, quiet...)...); err != nil {
		t.Logf("npm ci --prefer-offline failed, retrying online: %v\n%s", err, out)
		run(t, ctx, app, npmPath, append([]string{"ci"}, quiet...)...)
	}
	run(t, ctx, app, npmPath, append([]string{"install", "--no-save", "--prefer-offline", filepath.Join(tmp, packed[0].Filename)}, quiet...)...)
	run(t, ctx, app, filepath.Join(app, "node_modules", ".bin", "tsc"), "--noEmit", "-p", ".")
	run(t, ctx, app, filepath.Join(app, "node_modules", ".bin", "tsc"), "-p", "tsconfig.node.json")
	run(t, ctx, app, filepath.Join(app, "node_modules", ".bin", "vite"), "build", "--logLevel", "warn")

	assets, err := filepath.Glob(filepath.Join(app, "dist", "assets", "*.js"))
	if err != nil || len(assets) == 0 {
		t.Fatalf("vite build wrote no JavaScript: %v", err)
	}
	var bundle []byte
	for _, a := range assets {
		b, err := os.ReadFile(a)
		if err != nil {
			t.Fatal(err)
		}
		bundle = append(bundle, b...)
	}
	// A string from switchyard.js that survives minification.
	if !bytes.Contains(bundle, []byte("no WebSocket implementation")) {
		t.Error("the vite bundle does not contain the client")
	}
	if got := run(t, ctx, app, "node", "smoke.mjs"); !strings.Contains(got, "@switchyard/client@") {
		t.Errorf("node smoke.mjs printed %q", got)
	}
}
