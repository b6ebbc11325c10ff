package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const adminKey = "cli-test-admin-key-0123456789"

// gateway is an in-process gateway with an admin key; clients without a
// token may publish, subscribe and join groups.
type gateway struct {
	URL string // http:// base URL

	mu           sync.Mutex // guards following
	contentTypes map[string]string
}

func newGateway(t *testing.T, mods ...func(*router.Options)) *gateway {
	t.Helper()
	eng := memengine.New(memengine.Options{Policy: engine.GroupPolicy{
		AckTimeout: 30 * time.Second, MaxAttempts: 1, BackoffMin: time.Millisecond, BackoffMax: time.Millisecond,
	}})
	opts := router.Options{
		Engine: eng, Registry: prometheus.NewRegistry(), StatsInterval: -1,
		Auth: router.AuthOptions{
			AdminKey:  adminKey,
			Anonymous: &router.Grants{Publish: []string{"#"}, Subscribe: []string{"#"}, Groups: []string{"#"}},
		},
	}
	for _, m := range mods {
		m(&opts)
	}
	rt, err := router.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway{contentTypes: map[string]string{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/ws" {
			g.mu.Lock()
			g.contentTypes[r.Method+" "+r.URL.Path] = r.Header.Get("Content-Type")
			g.mu.Unlock()
		}
		rt.ServeHTTP(w, r)
	}))
	g.URL = srv.URL
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rt.Shutdown(ctx)
		srv.Close()
		_ = eng.Close(ctx)
	})
	return g
}

// syncBuffer is a bytes.Buffer safe for a command writing while the test
// reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// result is what one command run produced.
type result struct {
	code           int
	stdout, stderr string
}

// cli runs one command line against g with the given environment
// variables and stdin; stdout is not a terminal.
func (g *gateway) cli(t *testing.T, env map[string]string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb syncBuffer
	code := run(ctx, args, g.env(env, stdin, &out, &errb))
	return result{code, out.String(), errb.String()}
}

func (g *gateway) env(vars map[string]string, stdin string, out, errb *syncBuffer) environment {
	return environment{
		getenv: func(k string) string {
			if v, ok := vars[k]; ok {
				return v
			}
			if k == "SWITCHYARD_URL" {
				return g.URL
			}
			return ""
		},
		stdin:  strings.NewReader(stdin),
		stdout: out,
		stderr: errb,
	}
}

// ok runs a command that must succeed and returns its stdout.
func (g *gateway) ok(t *testing.T, args ...string) string {
	t.Helper()
	r := g.cli(t, nil, "", args...)
	if r.code != 0 {
		t.Fatalf("switchyard %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
	}
	return r.stdout
}

// lines decodes JSON lines.
func lines(t *testing.T, out string) []map[string]any {
	t.Helper()
	var res []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		res = append(res, m)
	}
	return res
}

func TestPubThenSub(t *testing.T) {
	g := newGateway(t)
	out := g.ok(t, "pub", "orders.created", `{"id":1}`, "--key", "c7", "--header", "region=eu", "--msg-id", "m1")
	if got := lines(t, out); len(got) != 1 || got[0]["topic"] != "orders.created" || got[0]["offset"] != 0.0 {
		t.Fatalf("pub printed %q", out)
	}
	// The same msg_id again is a duplicate.
	if out := g.ok(t, "pub", "orders.created", `{"id":1}`, "--key", "c7", "--msg-id", "m1"); !strings.Contains(out, `"duplicate":true`) {
		t.Errorf("repeated msg-id printed %q", out)
	}
	// Lines from stdin, one record each; "-" and no DATA both read stdin.
	r := g.cli(t, nil, "hello\n\n{\"id\":2}\n", "pub", "orders.paid", "-")
	if r.code != 0 || len(lines(t, r.stdout)) != 2 {
		t.Fatalf("pub from stdin: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}

	out = g.ok(t, "sub", "orders.#", "--from", "earliest", "--count", "3")
	got := lines(t, out)
	if len(got) != 3 {
		t.Fatalf("sub printed %d lines: %q", len(got), out)
	}
	var seen []string
	for _, m := range got {
		b, _ := json.Marshal(m["data"])
		seen = append(seen, m["topic"].(string)+" "+string(b))
		if m["op"] != "message" || m["pattern"] != "orders.#" {
			t.Errorf("message %v", m)
		}
	}
	want := map[string]bool{`orders.created {"id":1}`: true, `orders.paid "hello"`: true, `orders.paid {"id":2}`: true}
	for _, s := range seen {
		if !want[s] {
			t.Errorf("unexpected message %s", s)
		}
		delete(want, s)
	}
	if got[0]["topic"] == "orders.created" {
		if h, _ := got[0]["headers"].(map[string]any); h["region"] != "eu" || got[0]["key"] != "c7" {
			t.Errorf("key and headers lost: %v", got[0])
		}
	}
}

func TestReadableOutput(t *testing.T) {
	g := newGateway(t)
	if out := g.ok(t, "--json=false", "pub", "a.b", `{"n":1}`, "--key", "k"); !regexp.MustCompile(`^a\.b \[\d+\] #0\n$`).MatchString(out) {
		t.Errorf("readable pub printed %q", out)
	}
	out := g.ok(t, "sub", "a.*", "--from", "earliest", "--count", "1", "--json=false")
	if !regexp.MustCompile(`^\d\d:\d\d:\d\d\.\d{3} a\.b \[\d+\] #0 key=k \{"n":1\}\n$`).MatchString(out) {
		t.Errorf("readable sub printed %q", out)
	}
	// A terminal gets readable lines without asking.
	var stdout, stderr syncBuffer
	env := g.env(nil, "", &stdout, &stderr)
	env.tty = true
	if code := run(context.Background(), []string{"topics"}, env); code != 0 || !strings.HasPrefix(stdout.String(), "TOPIC") {
		t.Errorf("topics on a terminal: exit %d, %q %q", code, stdout.String(), stderr.String())
	}
	if out := g.ok(t, "--json", "version"); !strings.Contains(out, `"version":`) {
		t.Errorf("version --json printed %q", out)
	}
}

func TestSubFromLast(t *testing.T) {
	g := newGateway(t)
	for _, d := range []string{"1", "2", "3"} {
		g.ok(t, "pub", "prices.eur", d)
	}
	g.ok(t, "pub", "prices.usd", "7")
	got := lines(t, g.ok(t, "sub", "prices.*", "--from", "last", "--count", "2"))
	seen := map[string]any{}
	for _, m := range got {
		seen[m["topic"].(string)] = m["data"]
	}
	if len(got) != 2 || seen["prices.eur"] != 3.0 || seen["prices.usd"] != 7.0 {
		t.Errorf("--from last printed %v, want the newest record of each topic", got)
	}
}

func TestSubLive(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"sub", "live.*", "--filter", "region=eu", "--count", "2"}, g.env(nil, "", &out, &errb))
	}()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "subscribed to live.*") {
		if time.Now().After(deadline) {
			t.Fatalf("sub did not subscribe: %q", errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	for i, region := range []string{"eu", "us", "eu"} {
		g.ok(t, "pub", "live.x", `{"i":`+string(rune('0'+i))+`}`, "--header", "region="+region)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("sub exit %d: %s", code, errb.String())
		}
	case <-ctx.Done():
		t.Fatal("sub did not return")
	}
	got := lines(t, out.String())
	if len(got) != 2 || got[0]["data"].(map[string]any)["i"] != 0.0 || got[1]["data"].(map[string]any)["i"] != 2.0 {
		t.Errorf("filtered live sub printed %q", out.String())
	}
}

func TestSubStopsOnCancel(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"sub", "quiet"}, g.env(nil, "", &out, &errb)) }()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(errb.String(), "subscribed") {
		if time.Now().After(deadline) {
			t.Fatalf("sub did not subscribe: %q", errb.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel() // as Ctrl-C does
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("interrupted sub exit %d", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sub did not stop")
	}
}

func TestGroups(t *testing.T) {
	g := newGateway(t)
	for _, d := range []string{"1", "2", "3"} {
		g.ok(t, "pub", "jobs.a", d)
	}
	out := g.ok(t, "sub", "jobs.*", "--group", "workers", "--ack", "--count", "3")
	if got := lines(t, out); len(got) != 3 || got[0]["group"] != "workers" || got[0]["attempt"] != 1.0 {
		t.Fatalf("group sub printed %q", out)
	}
	eventually(t, "the group commits all three", func() bool {
		gr := lines(t, g.ok(t, "group", "show", "workers"))
		return len(gr) == 1 && gr[0]["lag"] == 0.0
	})
	if gs := lines(t, g.ok(t, "groups")); len(gs) != 1 || gs[0]["name"] != "workers" || gs[0]["pattern"] != "jobs.*" {
		t.Errorf("groups printed %v", gs)
	}
	text := g.ok(t, "--json=false", "group", "show", "workers")
	if !strings.Contains(text, "pattern: jobs.*") || !regexp.MustCompile(`jobs\.a\s+0\s+\S+\s+3\s+3\s+0`).MatchString(text) {
		t.Errorf("readable group show:\n%s", text)
	}

	// The first sub's member leaves once its connection is closed. A seek
	// before that would deliver offset 1 to it, and with one attempt
	// allowed the record would be dead-lettered instead of replayed.
	eventually(t, "the first member leaves", func() bool {
		gr := lines(t, g.ok(t, "group", "show", "workers"))
		if len(gr) != 1 {
			return false
		}
		ms, ok := gr[0]["members"].([]any)
		return ok && len(ms) == 0
	})

	// Seek needs the admin key; then the group replays.
	r := g.cli(t, nil, "", "group", "seek", "workers", "--topic", "jobs.a", "--offset", "1")
	if r.code != 1 || !strings.Contains(r.stderr, "--admin-key") {
		t.Errorf("seek without the admin key: exit %d, %q", r.code, r.stderr)
	}
	g.ok(t, "--admin-key", adminKey, "group", "seek", "workers", "--topic", "jobs.a", "--offset", "1")
	out = g.ok(t, "sub", "jobs.*", "--group", "workers", "--ack", "--count", "2")
	if got := lines(t, out); len(got) != 2 || got[0]["offset"] != 1.0 {
		t.Errorf("after seek the group got %q", out)
	}
	if r := g.cli(t, nil, "", "group", "seek", "workers", "--topic", "jobs.a"); r.code != 2 {
		t.Errorf("seek without --offset or --time: exit %d", r.code)
	}
}

func TestTopics(t *testing.T) {
	g := newGateway(t)
	env := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	r := g.cli(t, nil, "", "topic", "create", "billing.invoices", "--partitions", "3")
	if r.code != 1 || !strings.Contains(r.stderr, "--admin-key") {
		t.Fatalf("create without the admin key: exit %d, %q", r.code, r.stderr)
	}
	r = g.cli(t, env, "", "topic", "create", "billing.invoices", "--partitions", "3", "--max-messages", "100", "--max-age", "1h", "--on-full", "drop_oldest")
	if r.code != 0 {
		t.Fatalf("create: exit %d, %q", r.code, r.stderr)
	}
	created := lines(t, r.stdout)
	if len(created) != 1 || created[0]["partitions"] != 3.0 || created[0]["retention"].(map[string]any)["max_messages"] != 100.0 {
		t.Errorf("create printed %q", r.stdout)
	}
	if r := g.cli(t, env, "", "topic", "create", "billing.invoices"); r.code != 1 || !strings.Contains(r.stderr, `topic "billing.invoices" exists`) {
		t.Errorf("create again: exit %d, %q", r.code, r.stderr)
	}
	g.ok(t, "pub", "billing.invoices", `{"total":9}`)
	if ts := lines(t, g.ok(t, "topics")); len(ts) != 1 || ts[0]["name"] != "billing.invoices" {
		t.Errorf("topics printed %v", ts)
	}
	text := g.ok(t, "--json=false", "topics")
	if !regexp.MustCompile(`(?m)^billing\.invoices\s+3\s+1\s+drop_oldest\s+100 records, 1h`).MatchString(text) {
		t.Errorf("readable topics:\n%s", text)
	}
	text = g.ok(t, "--json=false", "topic", "show", "billing.invoices")
	if !strings.Contains(text, "partitions:  3") || strings.Count(text, "\n") != 5+1+3 {
		t.Errorf("readable topic show:\n%s", text)
	}
	if r := g.cli(t, nil, "", "topic", "show", "nope"); r.code != 1 || !strings.Contains(r.stderr, `unknown topic "nope"`) {
		t.Errorf("show unknown: exit %d, %q", r.code, r.stderr)
	}
	if r := g.cli(t, env, "", "topic", "delete", "billing.invoices", "--yes"); r.code != 0 {
		t.Errorf("delete: exit %d, %q", r.code, r.stderr)
	}
	if ts := lines(t, g.ok(t, "topics")); len(ts) != 0 {
		t.Errorf("after delete, topics printed %v", ts)
	}
}

func TestDeadLetters(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A member that nacks: with one attempt allowed, each record is
	// dead-lettered at once.
	sub := dialMember(ctx, t, g, "pay.*", "billing")
	g.ok(t, "pub", "pay.card", `{"n":1}`)
	g.ok(t, "pub", "pay.card", `{"n":2}`)
	for range 2 {
		select {
		case m := <-sub.C:
			if err := m.Nack(ctx, "card declined"); err != nil {
				t.Fatal(err)
			}
		case <-ctx.Done():
			t.Fatal("no delivery")
		}
	}
	if err := sub.Unsubscribe(ctx); err != nil {
		t.Fatal(err)
	}
	admin := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	var dls []map[string]any
	eventually(t, "two dead letters", func() bool {
		r := g.cli(t, admin, "", "deadletters", "--group", "billing")
		dls = lines(t, r.stdout)
		return r.code == 0 && len(dls) == 2
	})
	if dls[0]["error"] != "card declined" || dls[0]["reason"] != "max_attempts" {
		t.Errorf("dead letter %v", dls[0])
	}
	text := g.cli(t, admin, "", "--json=false", "deadletters").stdout
	if !regexp.MustCompile(`(?m)^\S+\s+max_attempts\s+billing\s+pay\.card\s+\d+\s+\d+\s+1\s+card declined$`).MatchString(text) {
		t.Errorf("readable deadletters:\n%s", text)
	}
	if r := g.cli(t, nil, "", "deadletters"); r.code != 1 || !strings.Contains(r.stderr, "--admin-key") {
		t.Errorf("deadletters without the admin key: exit %d, %q", r.code, r.stderr)
	}
	r := g.cli(t, admin, "", "deadletters", "--redrive", "--id", dls[0]["id"].(string))
	if r.code != 0 || !strings.Contains(r.stdout, `"redriven":1`) {
		t.Fatalf("redrive one: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := g.cli(t, admin, "", "deadletters", "--redrive", "--id", "no-such-id"); r.code != 1 {
		t.Errorf("redrive of an unknown id: exit %d", r.code)
	}
	// The redriven record goes back to its group in place: nothing is
	// appended to the topic.
	if out := g.ok(t, "topic", "show", "pay.card"); !strings.Contains(out, `"next":2`) {
		t.Errorf("after redrive the topic is %s, want next offset 2", out)
	}
}

func TestURLForms(t *testing.T) {
	g := newGateway(t)
	ws := "ws" + strings.TrimPrefix(g.URL, "http")
	for _, u := range []string{g.URL, g.URL + "/", ws, ws + "/v1/ws"} {
		t.Run(u, func(t *testing.T) {
			if out := g.ok(t, "pub", "--url", u, "urls.t", "1"); !strings.Contains(out, `"topic":"urls.t"`) {
				t.Errorf("pub via %s printed %q", u, out)
			}
			if out := g.ok(t, "--url", u, "topics"); !strings.Contains(out, `"urls.t"`) {
				t.Errorf("topics via %s printed %q", u, out)
			}
		})
	}
	r := g.cli(t, map[string]string{"SWITCHYARD_URL": "ftp://x"}, "", "topics")
	if r.code != 2 || !strings.Contains(r.stderr, "scheme") {
		t.Errorf("bad scheme: exit %d, %q", r.code, r.stderr)
	}
	r = g.cli(t, map[string]string{"SWITCHYARD_URL": "http://127.0.0.1:1"}, "", "topics")
	if r.code != 1 {
		t.Errorf("unreachable gateway: exit %d, %q", r.code, r.stderr)
	}
}

func TestContentType(t *testing.T) {
	g := newGateway(t)
	admin := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	g.cli(t, admin, "", "topic", "create", "ct.t")
	g.cli(t, admin, "", "topics")
	g.cli(t, admin, "", "deadletters", "--redrive")
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.contentTypes) < 2 {
		t.Fatalf("saw only %v", g.contentTypes)
	}
	for call, ct := range g.contentTypes {
		if ct != "application/json" {
			t.Errorf("%s sent Content-Type %q", call, ct)
		}
	}
}

func TestUsage(t *testing.T) {
	g := newGateway(t)
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no command", nil, 2, "commands:"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"sub without pattern", []string{"sub"}, 2, "sub needs a PATTERN"},
		{"bad from", []string{"sub", "a", "--from", "yesterday"}, 2, "--from"},
		{"ack without group", []string{"sub", "a", "--ack"}, 2, "--ack needs --group"},
		{"pub without topic", []string{"pub"}, 2, "pub needs a TOPIC"},
		{"too many arguments", []string{"pub", "a", "1", "2"}, 2, `unexpected argument "2"`},
		{"unknown flag", []string{"topics", "--nope"}, 2, "flag provided but not defined"},
		{"bad filter", []string{"sub", "a", "--filter", "x"}, 2, "not k=v"},
		{"help", []string{"pub", "-h"}, 0, "-msg-id"},
		{"invalid pattern", []string{"sub", "a..b"}, 1, `invalid pattern "a..b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := g.cli(t, nil, "", tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit %d and %q", r.code, r.stderr, tc.code, tc.want)
			}
		})
	}
}

func TestParseFrom(t *testing.T) {
	for in, want := range map[string]string{
		"earliest":             `"earliest"`,
		"latest":               `"latest"`,
		"last":                 `"last"`,
		"2026-11-29T08:00:00Z": `{"time":"2026-11-29T08:00:00Z"}`,
	} {
		f, err := parseFrom(in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(f)
		if string(b) != want {
			t.Errorf("--from %s sends %s, want %s", in, b, want)
		}
	}
}

// eventually polls cond until it holds, failing after a deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPubBatch: `pub --batch N` sends the lines of stdin as HTTP batch
// publishes: every record stored in order with its own msg_id, the
// positions printed in order; a refused line is named and stops the run
// after its batch.
func TestPubBatch(t *testing.T) {
	g := newGateway(t)
	var in strings.Builder
	for i := range 7 {
		fmt.Fprintf(&in, "{\"n\":%d}\n\n", i)
	}
	r := g.cli(t, nil, in.String(), "pub", "batch.t", "--batch", "3", "--msg-id", "b", "--key", "k")
	got := lines(t, r.stdout)
	if r.code != 0 || len(got) != 7 {
		t.Fatalf("pub --batch: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	for i, m := range got {
		if m["topic"] != "batch.t" || m["offset"] != float64(i) || m["duplicate"] != nil {
			t.Fatalf("line %d printed %v", i+1, m)
		}
	}
	// The same msg_ids again: duplicates at the first offsets.
	r = g.cli(t, nil, in.String(), "pub", "batch.t", "--batch", "5", "--msg-id", "b", "--key", "k")
	if got := lines(t, r.stdout); r.code != 0 || len(got) != 7 || got[6]["duplicate"] != true || got[6]["offset"] != 6.0 {
		t.Fatalf("repeat: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	// A line the gateway refuses: named, the run stops after its batch.
	r = g.cli(t, nil, "1\n2\n\"x\"\n3\n4\n", "pub", "batch.u", "--batch", "2", "--header", "$encoding=x")
	if r.code == 0 || !strings.Contains(r.stderr, "line 1") {
		t.Fatalf("refused batch: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if r := g.cli(t, nil, "", "pub", "batch.t", "--batch", "1001"); r.code != 2 || !strings.Contains(r.stderr, "--batch") {
		t.Fatalf("--batch 1001: exit %d, %q", r.code, r.stderr)
	}
}
