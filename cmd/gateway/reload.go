package main

// Reload: SIGHUP and POST /v1/admin/reload load the settings again, from
// the config file, the environment the gateway started with and its
// command line, and read the key files again; the registry compares the
// new settings with the running ones, setting by setting.
//
// A reload is all or nothing. When every changed setting can change while
// the gateway runs (liveNames), they are applied and the reload reports
// which were reloaded and which were unchanged (the reply of POST
// /v1/admin/reload in PROTOCOL.md). When one cannot, or the file does not
// load or check, or the new keys, hooks or JWKS do not load, the whole
// reload is refused with a message naming why, and the running settings
// stay.
//
// What changes live: the log level (here), and through router.Reload the
// token keys and their files (contents included), the JWKS, the admin
// key, anonymous access, the hooks, the allowed origins and the limits in
// liveNames (see router/reload.go for when each takes effect: sessions
// already open keep their principal and their per-session limits). The
// certificate files are watched on their own (tls.go). Everything else
// (the listener, the engine, the session and queue bounds, the frame
// size, group policy, topic defaults) needs a restart; max-message-bytes
// reloads up to what --max-frame-bytes, fixed at start, lets a publish
// frame carry.
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

	"github.com/switchyard/switchyard/router"
)

// liveNames are the settings a reload may change in a running gateway;
// a change to any other is refused, naming it. README.md's "In
// production" section lists them too.
var liveNames = []string{
	"log-level",
	// keys and access
	"jwt-hmac-secret", "jwt-hmac-secret-file", "jwt-public-key", "jwt-audience", "jwt-issuer",
	"jwt-jwks-url", "jwt-jwks-file", "jwt-jwks-refresh", "jwt-claims-prefix", "jwt-claims",
	"jwt-refresh-lead", "admin-key", "admin-key-file", "allow-anonymous", "anonymous-subscribe",
	"anonymous-publish",
	// hooks
	"hook-url", "hooks", "hook-timeout", "hook-fail-open", "hook-headers", "hook-cookies",
	"hook-max-concurrent", "hook-max-concurrent-per-ip", "hook-cache-entries", "hook-cache-bytes",
	// browsers
	"allowed-origins",
	// limits
	"max-connections", "max-connections-per-ip", "connect-rate-per-ip", "max-subscriptions",
	"publish-rate", "max-topics", "max-last", "max-message-bytes", "http-publish-rate",
}

// reloadResult says what a reload changed.
type reloadResult = router.ReloadReport

// reloader holds the running settings and loads new ones.
type reloader struct {
	args   []string
	getenv func(string) string
	level  *slog.LevelVar
	log    *slog.Logger
	// apply hands the new settings to the running gateway (the router's
	// Reload); nil applies only the log level. An error refuses the
	// reload.
	apply func(cfg config) error
	// applyTopics makes sure the topics of the config file exist
	// (topics.go); nil: they are not applied.
	applyTopics func(cfg config) error

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
	if len(refused) > 0 {
		return reloadResult{}, fmt.Errorf("reload refused, keeping the running settings: %s cannot change while the gateway runs; restart it to apply them (the settings that reload live: %s)", strings.Join(refused, ", "), strings.Join(liveNames, ", "))
	}
	topicsChanged := !sameTopics(r.cfg.TopicList, next.TopicList)
	if topicsChanged {
		res.Reloaded = append(res.Reloaded, "topics")
	} else {
		res.Unchanged = append(res.Unchanged, "topics")
	}
	for _, name := range sortedKeys(keys, r.keys) {
		if keys[name] != r.keys[name] && !slices.Contains(res.Reloaded, name) {
			res.Reloaded = append(res.Reloaded, name+" (the file's contents)")
		}
	}
	// The topics list is the router's topic policies too: a change of it
	// alone goes to the router as well.
	if r.apply != nil && slices.ContainsFunc(res.Reloaded, func(name string) bool { return name != "log-level" }) {
		if err := r.apply(next); err != nil {
			return reloadResult{}, fmt.Errorf("reload refused, keeping the running settings: %w", err)
		}
	}
	level, _ := logLevel(next.LogLevel) // validated
	r.level.Set(level)
	r.cfg, r.keys = next, keys
	if r.applyTopics != nil && topicsChanged {
		// After the rest: a topic made cannot be taken back, so it comes
		// last, and a failure here is reported with the rest applied; the
		// next reload tries the topics again.
		if err := r.applyTopics(next); err != nil {
			r.cfg.TopicList = nil
			return reloadResult{}, fmt.Errorf("reload applied the other settings, but the topics of the config were not all made: %w", err)
		}
	}
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
				r.logReloaded(res)
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		cancel()
		<-done
	}
}

// logReloaded logs what a reload changed.
func (r *reloader) logReloaded(res reloadResult) {
	r.log.Info("settings reloaded", "reloaded", res.Reloaded, "unchanged", len(res.Unchanged),
		"note", "sessions already open keep their principal and per-session limits; settings other than the live ones need a restart")
}

// reloadHTTP is the reload of POST /v1/admin/reload: it logs as a SIGHUP's
// does.
func (r *reloader) reloadHTTP(context.Context) (router.ReloadReport, error) {
	res, err := r.reload()
	if err != nil {
		r.log.Warn(err.Error())
		return res, err
	}
	r.logReloaded(res)
	return res, nil
}

// keyDigests returns a digest of each key file the settings name, by
// setting, so that a reload notices new key material under an unchanged
// name (a JWKS file too, which the router also reads again by itself).
func keyDigests(cfg config) (map[string][sha256.Size]byte, error) {
	files := map[string][]string{
		"jwt-hmac-secret-file": splitList(cfg.Keys.HMACSecretFile),
		"admin-key-file":       splitList(cfg.Keys.AdminKeyFile),
		"jwt-jwks-file":        splitList(cfg.Router.Auth.JWKSFile),
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
