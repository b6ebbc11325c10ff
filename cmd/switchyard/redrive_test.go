package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
)

// TestRedriveAllAsksFirst: deadletters --redrive with no filter redrives
// every letter, so it asks on a terminal first, refuses without one, and
// goes ahead with --yes; the letter goes back to its group in place.
func TestRedriveAllAsksFirst(t *testing.T) {
	g := newGateway(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub := dialMember(ctx, t, g, "orders", "shipping")
	// next takes the next delivery and nacks it: with one attempt allowed
	// it is dead-lettered at once.
	nackNext := func() *client.Message {
		t.Helper()
		select {
		case m := <-sub.C:
			if err := m.Nack(ctx, "no stock"); err != nil {
				t.Fatal(err)
			}
			return m
		case <-ctx.Done():
			t.Fatal("no delivery")
			return nil
		}
	}
	admin := map[string]string{"SWITCHYARD_ADMIN_KEY": adminKey}
	letters := func() int {
		r := g.cli(t, admin, "", "deadletters")
		if r.code != 0 {
			t.Fatalf("deadletters: exit %d, %q", r.code, r.stderr)
		}
		return len(lines(t, r.stdout))
	}
	g.ok(t, "pub", "orders", `{"n":1}`)
	first := nackNext()
	eventually(t, "the dead letter", func() bool { return letters() == 1 })

	// onTerminal runs the CLI as if stdin were a terminal that types in.
	onTerminal := func(in string, args ...string) result {
		var out, errb syncBuffer
		env := g.env(admin, in, &out, &errb)
		env.ttyIn = true
		code := run(ctx, args, env)
		return result{code, out.String(), errb.String()}
	}

	if r := g.cli(t, admin, "", "deadletters", "--redrive"); r.code != 2 || !strings.Contains(r.stderr, "add --yes") {
		t.Fatalf("redrive of everything without a terminal: exit %d, %q; want 2 asking for --yes", r.code, r.stderr)
	}
	r := onTerminal("n\n", "deadletters", "--redrive")
	if r.code != 1 || !strings.Contains(r.stderr, "Redrive all 1 dead letters of 1 groups to their groups? [y/N]") || !strings.Contains(r.stderr, "cancelled") {
		t.Fatalf("redrive answered no: exit %d, %q", r.code, r.stderr)
	}
	if n := letters(); n != 1 {
		t.Fatalf("%d letters after a cancelled redrive, want 1", n)
	}

	r = onTerminal("y\n", "deadletters", "--redrive")
	if r.code != 0 || !strings.Contains(r.stdout, `"redriven":1`) {
		t.Fatalf("redrive answered yes: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	again := nackNext()
	if again.Offset != first.Offset || again.Attempt != 1 {
		t.Fatalf("redelivered offset %d attempt %d, want offset %d attempt 1", again.Offset, again.Attempt, first.Offset)
	}
	eventually(t, "the second dead letter", func() bool { return letters() == 1 })

	if r := g.cli(t, admin, "", "deadletters", "--redrive", "--yes"); r.code != 0 || !strings.Contains(r.stdout, `"redriven":1`) {
		t.Fatalf("redrive --yes: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if m := nackNext(); m.Offset != first.Offset || m.Attempt != 1 {
		t.Fatalf("redelivered offset %d attempt %d, want offset %d attempt 1", m.Offset, m.Attempt, first.Offset)
	}
	// A filter names what is redriven: no question asked.
	eventually(t, "the third dead letter", func() bool { return letters() == 1 })
	if r := g.cli(t, admin, "", "deadletters", "--redrive", "--group", "shipping"); r.code != 0 || !strings.Contains(r.stdout, `"redriven":1`) {
		t.Fatalf("redrive --group: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	if out := g.ok(t, "topic", "show", "orders"); !strings.Contains(out, `"next":1`) {
		t.Errorf("after three redrives the topic is %s, want next offset 1: nothing appended", out)
	}
}

// dialMember dials g with the Go client and joins group on pattern; the
// client closes when the test ends.
func dialMember(ctx context.Context, t *testing.T, g *gateway, pattern, group string) *client.Subscription {
	t.Helper()
	c, err := client.Dial(ctx, g.URL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sub, err := c.SubscribeChan(ctx, pattern, client.SubscribeOptions{Group: group})
	if err != nil {
		t.Fatal(err)
	}
	return sub
}
