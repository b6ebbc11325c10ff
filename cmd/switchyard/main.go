// Command switchyard is the command-line client of the Switchyard gateway:
// it streams and publishes records over the WebSocket protocol (through
// the Go client, package client) and calls the HTTP API for topics,
// consumer groups and dead letters.
//
//	switchyard sub 'orders.#' --from earliest
//	switchyard pub orders.created '{"id":42}' --key customer-7
//	tail -f events.log | switchyard pub events.raw -
//	switchyard topics
//	switchyard topic create orders.created --partitions 4
//	switchyard groups
//	switchyard group seek billing --topic orders.created --offset 0
//	switchyard deadletters --group billing --redrive
//	switchyard sub 'orders.#' --from last:10      # or --since 10m
//	switchyard presence chat.room1
//	switchyard info
//	switchyard token --secret-file hmac.secret --sub ada --publish 'orders.#' --ttl 1h
//
// Global flags, accepted before or after the command: --url (the gateway's
// base URL, ws:// or http://, http:// when it has no scheme; default
// $SWITCHYARD_URL or http://127.0.0.1:8080), --token ($SWITCHYARD_TOKEN),
// --admin-key ($SWITCHYARD_ADMIN_KEY; also the WebSocket's credential when
// there is no token) and --json. Output is readable lines on a
// terminal and JSON lines (one object per line) when stdout is not a
// terminal or with --json; --json=false forces readable lines.
//
// Errors name the offending value and the fix, without Go package
// prefixes, and name the flag or variable (--url, --token, --admin-key)
// when one of them is the likely cause (explain.go).
//
// Exit status: 0 on success, 1 when the gateway refused a call or could
// not be reached (or sub's topic was deleted), 2 on a usage error.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	env := environment{
		getenv: os.Getenv,
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		tty:    isTerminal(os.Stdout),
		ttyIn:  isTerminal(os.Stdin),
	}
	os.Exit(run(ctx, os.Args[1:], env))
}

// environment is what a command reads and writes besides its arguments.
type environment struct {
	getenv func(string) string
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	tty    bool // stdout is a terminal: readable lines by default
	ttyIn  bool // stdin is a terminal: a command may ask for confirmation
}

// isTerminal reports whether f is a character device, such as a terminal.
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// errUsage marks errors in the command line; run exits with 2 for them.
var errUsage = errors.New("usage")

func usagef(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{errUsage}, args...)...)
}

// command is one subcommand: name, synopsis and its body.
type command struct {
	name     string
	synopsis string
	run      func(ctx context.Context, g *globals, args []string) error
}

var commands = []command{
	{"sub", "sub PATTERN [--from earliest|latest|last|TIME] [--group G [--ack]] [--filter k=v]... [--count N]", runSub},
	{"pub", "pub TOPIC [DATA|-] [--key K] [--header k=v]... [--msg-id ID] [--priority 0-3] [--batch N]", runPub},
	{"topics", "topics", runTopics},
	{"topic", "topic create NAME [--partitions N] [--max-messages N] [--max-age D] [--on-full P] [--partitioner P] | delete NAME [--yes] | show NAME", runTopic},
	{"groups", "groups", runGroups},
	{"group", "group show G | seek G --topic T [--partition P] (--offset N | --time T) | delete G [--yes]", runGroup},
	{"deadletters", "deadletters [--group G] [--reason R] [--redrive [--id ID]... [--append-to-topics] [--yes]]", runDeadLetters},
	{"presence", "presence TOPIC", runPresence},
	{"info", "info", runInfo},
	{"sessions", "sessions", runSessions},
	{"session", "session end ID | unsubscribe ID PATTERN [--group G]", runSession},
	{"token", "token (--secret-file F | --key-file F [--kid K]) [--sub NAME] [--publish P]... [--subscribe P]... [--groups G]... [--ttl D]", runToken},
	{"version", "version (or --version)", runVersion},
	{"help", "help [COMMAND]", nil},
}

// run executes one command line and returns the exit status.
func run(ctx context.Context, args []string, env environment) int {
	g := newGlobals(env)
	fs := g.flagSet("switchyard")
	showVersion := fs.Bool("version", false, "print the version and exit")
	fs.Usage = func() { usage(env.stderr) }
	rest, err := parse(fs, args, -1)
	if errors.Is(err, flag.ErrHelp) {
		usage(env.stdout)
		return 0
	}
	if err != nil {
		fmt.Fprintf(env.stderr, "switchyard: %s\n", strings.TrimPrefix(err.Error(), "usage: "))
		usage(env.stderr)
		return 2
	}
	if *showVersion {
		rest = []string{"version"}
	}
	if len(rest) == 0 {
		usage(env.stderr)
		return 2
	}
	name := rest[0]
	helpOut := env.stderr
	if name == "help" {
		if len(rest) == 1 {
			usage(env.stdout)
			return 0
		}
		// help COMMAND: the command's flags, as COMMAND -h prints them.
		name, rest, helpOut = rest[1], []string{rest[1], "-h"}, env.stdout
	}
	for _, c := range commands {
		if c.name != name || c.run == nil {
			continue
		}
		err := c.run(ctx, g, rest[1:])
		switch {
		case err == nil:
			return 0
		case errors.Is(err, flag.ErrHelp):
			fmt.Fprintf(helpOut, "usage: switchyard %s\n\nflags:\n", c.synopsis)
			g.fs.SetOutput(helpOut)
			g.fs.PrintDefaults()
			return 0
		case errors.Is(err, errUsage):
			fmt.Fprintf(env.stderr, "switchyard %s: %v\nusage: switchyard %s\n", name, strings.TrimPrefix(err.Error(), "usage: "), c.synopsis)
			return 2
		case errors.Is(err, context.Canceled) && ctx.Err() != nil:
			return 0 // interrupted: a normal way to stop sub
		default:
			fmt.Fprintf(env.stderr, "switchyard %s: %s\n", name, g.explain(err))
			return 1
		}
	}
	fmt.Fprintf(env.stderr, "switchyard: unknown command %q\n", name)
	usage(env.stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: switchyard [--url URL] [--token T] [--admin-key K] [--json] COMMAND [ARGS]")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintln(w, "  "+c.synopsis)
	}
	fmt.Fprintln(w, "\nenvironment: SWITCHYARD_URL (a URL without a scheme is http://), SWITCHYARD_TOKEN, SWITCHYARD_ADMIN_KEY")
	fmt.Fprintln(w, "run 'switchyard help COMMAND' (or 'switchyard COMMAND -h') for a command's flags")
}

// parse parses flags anywhere among the arguments (the standard library's
// flag package stops at the first argument that is not a flag) and
// returns the positional arguments; after "--" every argument is
// positional. The top-level flag set stops at the command name, leaving
// the command's arguments to the command. More than max positional
// arguments is a usage error; max < 0 allows any number.
func parse(fs *flag.FlagSet, args []string, max int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		if consumed := args[:len(args)-len(rest)]; len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
		if fs.Name() == "switchyard" {
			pos = append(pos, args...)
			break
		}
	}
	if max >= 0 && len(pos) > max {
		return nil, usagef("unexpected argument %q", pos[max])
	}
	return pos, nil
}

// keyValues collects repeated k=v flags.
type keyValues map[string]string

func (kv keyValues) String() string {
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(k + "=" + kv[k])
	}
	return b.String()
}

func (kv keyValues) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not k=v", s)
	}
	kv[k] = v
	return nil
}

// stringList collects a repeated flag.
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }
