package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"
)

// startLogged runs the gateway with args on a loopback port, its log in
// the returned buffer, and stops it when the test ends.
func startLogged(t *testing.T, args ...string) (string, *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out := &lockedBuffer{}
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, append([]string{"--addr", "127.0.0.1:0", "--stats-interval", "-1s"}, args...), noEnv, out, gatewayListening(func(a string) { addrc <- a }))
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		cancel()
		t.Fatalf("run: %v", err)
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("gateway did not start")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-errc:
			if err != nil {
				t.Errorf("shutdown: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	return addr, out
}

// waitLog waits until the log holds a line with every one of want after
// position from, and returns the log's length after it.
func waitLog(t *testing.T, out *lockedBuffer, from int, want ...string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := out.String()
		for _, line := range strings.SplitAfter(s[from:], "\n") {
			ok := strings.HasSuffix(line, "\n")
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			if ok {
				return len(s)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line with %q after:\n%s", want, s[from:])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestReloadOnSIGHUP: SIGHUP reads the config file again; a setting that
// can change live (the log level) is applied, one that cannot is refused by
// name, and a file that does not load is refused with its error, the
// running settings kept each time.
func TestReloadOnSIGHUP(t *testing.T) {
	file := writeConfig(t, "log-level: info\nmax-attempts: 3\n")
	addr, out := startLogged(t, "--config", file)
	session := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, _, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws", nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _, _ = c.Read(ctx) // welcome
		c.Close(websocket.StatusNormalClosure, "")
	}
	hup := func(text string) {
		if err := os.WriteFile(file, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(syscall.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}

	at := len(out.String())
	hup("log-level: debug\nmax-attempts: 3\n")
	at = waitLog(t, out, at, "level=INFO", "settings reloaded", "reloaded=[log-level]")
	session()
	at = waitLog(t, out, at, "level=DEBUG", "session ended")

	hup("log-level: info\nmax-attempts: 5\nmax-partitions: 9\nmax-topics: 9\n")
	at = waitLog(t, out, at, "level=WARN", "reload refused, keeping the running settings", "max-partitions, max-attempts cannot change while the gateway runs", "the settings that reload live: log-level")
	session()
	at = waitLog(t, out, at, "level=DEBUG", "session ended") // still debug: nothing applied

	hup("max-attempts: lots\n")
	waitLog(t, out, at, "level=WARN", "reload refused", "line 1: max-attempts: expected an integer")
}

// TestReloadKeyFiles: a key file whose contents changed under the same
// name is noticed and reloaded; a key file gone refuses the reload.
func TestReloadKeyFiles(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "admin.key")
	if err := os.WriteFile(keyFile, []byte("first-admin-key-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := []string{"--admin-key-file", keyFile}
	cfg, err := loadConfig(args, noEnv, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rl, err := newReloader(cfg, args, noEnv, new(slog.LevelVar), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	res, err := rl.reload()
	if err != nil || len(res.Reloaded) != 0 || len(res.Unchanged) == 0 {
		t.Fatalf("reload of the same settings: %+v, %v", res, err)
	}
	if err := os.WriteFile(keyFile, []byte("second-admin-key-0123\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if res, err := rl.reload(); err != nil || !slices.Contains(res.Reloaded, "admin-key-file (the file's contents)") {
		t.Fatalf("changed key file: %+v, %v", res, err)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := rl.reload(); err == nil || !strings.Contains(err.Error(), "admin-key-file") {
		t.Fatalf("missing key file: %v", err)
	}
}

// TestReloadOverHTTP: POST /v1/admin/reload with the admin key reads a
// rotated secret file and a lowered limit; a token of the new secret is
// admitted and one of the old refused, the session admitted before with
// the old one is closed; a config that does not check is refused with a
// 400 naming why and changes nothing.
func TestReloadOverHTTP(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secrets")
	oldSecret, newSecret := "old-secret-0123456789abcdef-012345", "new-secret-0123456789abcdef-012345"
	if err := os.WriteFile(secretFile, []byte(oldSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	const admin = "the-admin-key-0123456789"
	file := writeConfig(t, "jwt-hmac-secret-file: "+secretFile+"\nadmin-key: "+admin+"\nmax-subscriptions: 10\n")
	addr, out := startLogged(t, "--config", file)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	token := func(secret string) string {
		now := time.Now()
		s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "op", "iat": now.Unix(), "exp": now.Add(time.Minute).Unix(),
			"subscribe": []string{"#"}}).SignedString([]byte(secret))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dial := func(tok string) (*websocket.Conn, map[string]any, int) {
		c, resp, err := websocket.Dial(ctx, "ws://"+addr+"/v1/ws?token="+tok, nil)
		if err != nil {
			if resp == nil {
				t.Fatal(err)
			}
			return nil, nil, resp.StatusCode
		}
		_, data, err := c.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var welcome map[string]any
		if err := json.Unmarshal(data, &welcome); err != nil {
			t.Fatal(err)
		}
		return c, welcome, http.StatusSwitchingProtocols
	}
	reload := func() (int, map[string]any) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/admin/reload", strings.NewReader("{}"))
		req.Header.Set("Authorization", "Bearer "+admin)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body
	}

	ended, _, st := dial(token(oldSecret))
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("old token before the rotation: %d", st)
	}
	defer ended.CloseNow()

	if err := os.WriteFile(secretFile, []byte(newSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("jwt-hmac-secret-file: "+secretFile+"\nadmin-key: "+admin+"\nmax-subscriptions: 3\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	at := len(out.String())
	st, body := reload()
	if st != http.StatusOK || !slices.Contains(toStrings(body["reloaded"]), "max-subscriptions") ||
		!slices.Contains(toStrings(body["reloaded"]), "jwt-hmac-secret-file (the file's contents)") {
		t.Fatalf("reload: %d %v", st, body)
	}
	waitLog(t, out, at, "settings reloaded", "max-subscriptions")
	if _, _, st := dial(token(oldSecret)); st != http.StatusUnauthorized {
		t.Fatalf("old token after the rotation: %d, want 401", st)
	}
	c, welcome, st := dial(token(newSecret))
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("new token after the rotation: %d", st)
	}
	c.CloseNow()
	if got := welcome["limits"].(map[string]any)["max_subscriptions"]; got != 3.0 {
		t.Fatalf("max_subscriptions of a new session: %v, want 3", got)
	}
	// The session admitted with the old token is closed by the reload
	// (1008, its credential no longer accepted).
	if _, data, err := ended.Read(ctx); websocket.CloseStatus(err) != websocket.StatusPolicyViolation {
		t.Fatalf("session admitted before the rotation: %s %v, want close 1008", data, err)
	}

	// A bad file: refused, named, nothing changed.
	if err := os.WriteFile(file, []byte("jwt-hmac-secret-file: "+secretFile+"\nadmin-key: "+admin+"\nmax-subscriptions: 1\nmax-partitions: 5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, body = reload()
	if msg, _ := body["message"].(string); st != http.StatusBadRequest || !strings.Contains(msg, "max-partitions cannot change while the gateway runs") {
		t.Fatalf("reload of a restart-only change: %d %v", st, body)
	}
	if err := os.WriteFile(secretFile, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("jwt-hmac-secret-file: "+secretFile+"\nadmin-key: "+admin+"\nmax-subscriptions: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, body = reload()
	if msg, _ := body["message"].(string); st != http.StatusBadRequest || !strings.Contains(msg, "reload refused, keeping the running settings") {
		t.Fatalf("reload of a short secret: %d %v", st, body)
	}
	c, welcome, st = dial(token(newSecret))
	if st != http.StatusSwitchingProtocols {
		t.Fatalf("new token after the refused reloads: %d", st)
	}
	c.CloseNow()
	if got := welcome["limits"].(map[string]any)["max_subscriptions"]; got != 3.0 {
		t.Fatalf("max_subscriptions after the refused reloads: %v, want 3", got)
	}
}

// toStrings returns a JSON array of strings as a slice.
func toStrings(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, x.(string))
	}
	return out
}
