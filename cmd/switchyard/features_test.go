package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/router"
)

func TestHelpAndVersion(t *testing.T) {
	g := newGateway(t)
	for _, tc := range []struct {
		name   string
		args   []string
		stdout string
	}{
		{"help", []string{"help"}, "commands:"},
		{"help command", []string{"help", "pub"}, "-msg-id"},
		{"--version", []string{"--version", "--json=false"}, "switchyard "},
		{"version", []string{"version", "--json=false"}, "switchyard "},
		{"-h", []string{"-h"}, "commands:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := g.cli(t, nil, "", tc.args...)
			if r.code != 0 || !strings.Contains(r.stdout, tc.stdout) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q on stdout", r.code, r.stdout, r.stderr, tc.stdout)
			}
		})
	}
}

func TestInfoAndPresence(t *testing.T) {
	g := newGateway(t)
	g.ok(t, "pub", "info.a", "1")
	info := lines(t, g.ok(t, "--admin-key", adminKey, "info"))
	if len(info) != 1 {
		t.Fatalf("info printed %v", info)
	}
	for _, k := range []string{"version", "engine", "epoch", "node", "topics", "groups", "sessions", "limits"} {
		if _, ok := info[0][k]; !ok {
			t.Errorf("info has no %q: %v", k, info[0])
		}
	}
	if info[0]["engine"] != "memengine" || info[0]["topics"] != 1.0 {
		t.Errorf("info = %v", info[0])
	}
	p := lines(t, g.ok(t, "presence", "info.a"))
	if len(p) != 1 || p[0]["count"] != 0.0 {
		t.Errorf("presence printed %v", p)
	}
}

// TestListingsReadEveryPage: more topics than one page holds are all
// listed.
func TestListingsReadEveryPage(t *testing.T) {
	g := newGateway(t)
	n := router.DefaultPageLimit + 5
	env := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	for i := range n {
		if r := g.cli(t, env, "", "topic", "create", "page.t"+strings.Repeat("x", i%3)+itoa(i)); r.code != 0 {
			t.Fatalf("create: %d %s", r.code, r.stderr)
		}
	}
	if got := lines(t, g.ok(t, "topics")); len(got) != n {
		t.Errorf("topics listed %d, want %d", len(got), n)
	}
}

func TestSubStarts(t *testing.T) {
	g := newGateway(t)
	for i := range 5 {
		g.ok(t, "pub", "start.t", itoa(i))
	}
	data := func(out string) string {
		var ds []string
		for _, m := range lines(t, out) {
			ds = append(ds, itoa(int(m["data"].(float64))))
		}
		return strings.Join(ds, ",")
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"last:2", []string{"--from", "last:2", "--count", "2"}, "3,4"},
		{"since", []string{"--since", "1h", "--count", "5"}, "0,1,2,3,4"},
		{"from a duration", []string{"--from", "1h", "--count", "1"}, "0"},
		{"partition and offset", []string{"--partition", "0", "--offset", "3", "--count", "2"}, "3,4"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := data(g.ok(t, append([]string{"sub", "start.t"}, tc.args...)...)); got != tc.want {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
	if r := g.cli(t, nil, "", "sub", "start.t", "--from", "last:0"); r.code != 2 || !strings.Contains(r.stderr, "last:N needs a count") {
		t.Errorf("last:0: exit %d, %q", r.code, r.stderr)
	}
}

// TestSubTopicDeleted: sub prints topic_deleted and exits non-zero.
func TestSubTopicDeleted(t *testing.T) {
	g := newGateway(t)
	g.ok(t, "pub", "gone.t", "1")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var out, errb syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"sub", "gone.t", "--from", "earliest"}, g.env(nil, "", &out, &errb)) }()
	eventually(t, "sub printed the record", func() bool { return strings.Contains(out.String(), `"offset":0`) })
	g.ok(t, "--admin-key", adminKey, "topic", "delete", "gone.t", "--yes")
	select {
	case code := <-done:
		if code != 1 || !strings.Contains(errb.String(), "topic gone.t was deleted") || !strings.Contains(out.String(), `{"op":"topic_deleted","pattern":"gone.t","topic":"gone.t"}`) {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
		}
	case <-ctx.Done():
		t.Fatal("sub did not exit after the topic was deleted")
	}
}

// TestAdminKeyForPubSub: with no anonymous grants, the admin key alone
// publishes and subscribes.
func TestAdminKeyForPubSub(t *testing.T) {
	g := newGateway(t, func(o *router.Options) { o.Auth.Anonymous = nil })
	if r := g.cli(t, nil, "", "pub", "adm.t", "1"); r.code != 1 || !strings.Contains(r.stderr, "--token or SWITCHYARD_TOKEN") {
		t.Errorf("pub without a credential: exit %d, %q", r.code, r.stderr)
	}
	env := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	if r := g.cli(t, env, "", "pub", "adm.t", "1"); r.code != 0 {
		t.Fatalf("pub with the admin key: exit %d, %q", r.code, r.stderr)
	}
	if r := g.cli(t, env, "", "sub", "adm.t", "--from", "earliest", "--count", "1"); r.code != 0 || len(lines(t, r.stdout)) != 1 {
		t.Errorf("sub with the admin key: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}

// TestToken: a token minted from the gateway's secret file carries the
// grants and the lifetime, and the gateway takes it.
func TestToken(t *testing.T) {
	secret := strings.Repeat("s", 40)
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte(secret+"\nolder-secret-older-secret-older-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g := newGateway(t, func(o *router.Options) {
		o.Auth.Anonymous = nil
		o.Auth.HMACSecrets = [][]byte{[]byte(secret)}
	})
	out := g.ok(t, "token", "--secret-file", file, "--sub", "ada", "--publish", "tok.a,tok.b", "--subscribe", "tok.#", "--ttl", "10m", "--json=false")
	tok := strings.TrimSpace(out)
	var cl jwt.MapClaims
	if _, err := jwt.ParseWithClaims(tok, &cl, func(*jwt.Token) (any, error) { return []byte(secret), nil }); err != nil {
		t.Fatalf("token %q: %v", tok, err)
	}
	if cl["sub"] != "ada" || len(cl["publish"].([]any)) != 2 || cl["exp"].(float64)-cl["iat"].(float64) != 600 {
		t.Errorf("claims = %v", cl)
	}
	env := map[string]string{"SWITCHYARD_TOKEN": tok}
	if r := g.cli(t, env, "", "pub", "tok.a", "1"); r.code != 0 {
		t.Errorf("pub with the token: exit %d, %q", r.code, r.stderr)
	}
	if r := g.cli(t, env, "", "pub", "tok.c", "1"); r.code != 1 || !strings.Contains(r.stderr, `not allowed to publish to "tok.c"`) {
		t.Errorf("pub outside the grants: exit %d, %q", r.code, r.stderr)
	}
	if r := g.cli(t, nil, "", "token", "--sub", "x"); r.code != 2 || !strings.Contains(r.stderr, "--secret-file") {
		t.Errorf("token without a key: exit %d, %q", r.code, r.stderr)
	}
}

// TestTerminalPrompts: pub says it reads the terminal; deletes ask.
func TestTerminalPrompts(t *testing.T) {
	g := newGateway(t)
	tty := func(stdin string, args ...string) result {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var out, errb syncBuffer
		env := g.env(map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}, stdin, &out, &errb)
		env.ttyIn = true
		code := run(ctx, args, env)
		return result{code, out.String(), errb.String()}
	}
	if r := tty("1\n", "pub", "tty.t"); r.code != 0 || !strings.Contains(r.stderr, "end with Ctrl-D") {
		t.Errorf("pub on a terminal: exit %d, %q", r.code, r.stderr)
	}
	if r := tty("n\n", "topic", "delete", "tty.t"); r.code != 1 || !strings.Contains(r.stderr, "Delete topic tty.t and every record it holds? [y/N]") || !strings.Contains(r.stderr, "nothing was deleted") {
		t.Errorf("delete answered n: exit %d, %q", r.code, r.stderr)
	}
	if r := tty("y\n", "topic", "delete", "tty.t"); r.code != 0 || !strings.Contains(r.stdout, "tty.t") {
		t.Errorf("delete answered y: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}
