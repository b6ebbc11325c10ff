package main

// Reload: SIGHUP loads the settings again, from the config file, the
// environment the gateway started with and its command line, and reads
// the key files again; the registry compares the new settings with the
// running ones, setting by setting.
//
// A reload is all or nothing. When every changed setting can change while
// the gateway runs, they are applied and the reload reports which were
// reloaded and which were unchanged (the reply of POST /v1/admin/reload in
// PROTOCOL.md). When one cannot, or the file does not load or check, the
// whole reload is refused with a message naming why, and the running
// settings stay.
//
// What can change live is what the gateway itself holds: the log level.
// The certificate files are watched on their own (tls.go). Everything the
// router or the engine was built with (keys, limits, hooks, origins,
// topic defaults) needs the router to take new options while it runs, so
// those changes are refused for now and named.
//
// Concurrency: a reloader is safe for concurrent use; reloads are
// serialized. The goroutine watchSignal starts ends when its stop
// function is called, which waits for it.

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
)

// reloadResult says what a reload changed.
type reloadResult struct {
	Reloaded  []string `json:"reloaded"`
	Unchanged []string `json:"unchanged"`
}

// reloader holds the running settings and loads new ones.
type reloader struct {
	args   []string
	getenv func(string) string
	level  *slog.LevelVar
	log    *slog.Logger

	mu   sync.Mutex // guards following; held through a reload
	cfg  config
	keys map[string][sha256.Size]byte // key files' digests, by setting
}

// newReloader returns a reloader of the gateway started with args and
// getenv into cfg, whose logger has level.
func newReloader(cfg config, args []string, getenv func(string) string, level *slog.LevelVar, log *slog.Logger) (*reloader, error) {
	keys, err := keyDigests(cfg)
	if err != nil {
		return nil, err
	}
	return &reloader{args: args, getenv: getenv, level: level, log: log, cfg: cfg, keys: keys}, nil
}

// reload loads the settings again and applies them if it can.
func (r *reloader) reload() (reloadResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	next, err := loadConfig(commandArgs(r.args), r.getenv, io.Discard)
	if err == nil {
		err = validate(next)
	}
	var keys map[string][sha256.Size]byte
	if err == nil {
		keys, err = keyDigests(next)
	}
	if err != nil {
		return reloadResult{}, fmt.Errorf("reload refused, keeping the running settings: %w", err)
	}
	var res reloadResult
	var refused []string
	old, cur := newRegistry(&r.cfg), newRegistry(&next)
	for i, s := range old.settings {
		if s.action || s.name == "config" {
			continue
		}
		changed := s.value.String() != cur.settings[i].value.String()
		switch {
		case !changed:
			res.Unchanged = append(res.Unchanged, s.name)
		case s.live:
			res.Reloaded = append(res.Reloaded, s.name)
		default:
			refused = append(refused, s.name)
		}
	}
	for _, name := range sortedKeys(keys, r.keys) {
		if keys[name] != r.keys[name] {
			refused = append(refused, name+" (the file's contents)")
		}
	}
	if len(refused) > 0 {
		return reloadResult{}, fmt.Errorf("reload refused, keeping the running settings: %s cannot change while the gateway runs; restart it to apply them", strings.Join(refused, ", "))
	}
	level, _ := logLevel(next.LogLevel) // validated
	r.level.Set(level)
	r.cfg, r.keys = next, keys
	return res, nil
}

// watchSignal reloads on each sig until stop is called, logging what each
// reload did; stop waits for the goroutine.
func (r *reloader) watchSignal(sig os.Signal) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, sig)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				res, err := r.reload()
				if err != nil {
					r.log.Warn(err.Error())
					continue
				}
				r.log.Info("settings reloaded", "reloaded", res.Reloaded, "unchanged", len(res.Unchanged))
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
}

// keyDigests returns a digest of each key file the settings name, by
// setting, so that a reload notices new key material under an unchanged
// name. A JWKS file is left out: the router reads it again by itself.
func keyDigests(cfg config) (map[string][sha256.Size]byte, error) {
	files := map[string][]string{
		"jwt-hmac-secret-file": splitList(cfg.Keys.HMACSecretFile),
		"admin-key-file":       splitList(cfg.Keys.AdminKeyFile),
	}
	for _, f := range splitList(cfg.Keys.PublicKeys) {
		if _, file, ok := strings.Cut(f, "="); ok {
			f = file
		}
		files["jwt-public-key"] = append(files["jwt-public-key"], f)
	}
	out := map[string][sha256.Size]byte{}
	var errs []error
	for name, list := range files {
		if len(list) == 0 {
			continue
		}
		h := sha256.New()
		for _, f := range list {
			data, err := os.ReadFile(f)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", name, err))
				continue
			}
			h.Write(data)
		}
		out[name] = [sha256.Size]byte(h.Sum(nil))
	}
	return out, errors.Join(errs...)
}

// sortedKeys returns the keys of a and b, sorted.
func sortedKeys[V any](a, b map[string]V) []string {
	var out []string
	for k := range a {
		out = append(out, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}
