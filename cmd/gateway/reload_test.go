package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
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

	hup("log-level: info\nmax-attempts: 5\nmax-topics: 9\n")
	at = waitLog(t, out, at, "level=WARN", "reload refused, keeping the running settings", "max-topics, max-attempts cannot change while the gateway runs")
	session()
	at = waitLog(t, out, at, "level=DEBUG", "session ended") // still debug: nothing applied

	hup("max-attempts: lots\n")
	waitLog(t, out, at, "level=WARN", "reload refused", "line 1: max-attempts: expected an integer")
}

// TestReloadKeyFiles: a key file whose contents changed under the same
// name is noticed and, as keys cannot change live yet, refused by name; a
// key file gone refuses the reload.
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
	if _, err := rl.reload(); err == nil || !strings.Contains(err.Error(), "admin-key-file (the file's contents) cannot change") {
		t.Fatalf("changed key file: %v", err)
	}
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if _, err := rl.reload(); err == nil || !strings.Contains(err.Error(), "admin-key-file") {
		t.Fatalf("missing key file: %v", err)
	}
}
