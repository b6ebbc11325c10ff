package faults

// Gateways that run as child processes, so that a scenario can kill one
// with SIGKILL.
//
// A gateway listed in Options.Processes runs the gateway command
// (cmd/gateway, built by BuildGateway) in a child process instead of a
// router and engine in this process: --engine nats on the cluster, its
// NATS connections through proxies of its own like the other gateways',
// its WebSocket listener on a loopback address the cluster picks. Its
// stdout and stderr go, a line at a time and named, to
// Options.ProcessOutput; it is ready once it logs "switchyard gateway
// listening", which the command does after its engine is up.
//
// Kill9Gateway sends it SIGKILL: no shutdown runs in it, and the kernel
// closes its sockets, so its NATS servers and its WebSocket clients see
// its connections end as a crash ends them. RestartGateway starts the
// command again on the same address, as a supervisor would.
//
// Owner: the Cluster. Close kills every gateway process and reaps it; a
// process is reaped by the goroutine that started it (which keeps its OS
// thread locked until then: on Linux the child gets SIGKILL, through
// Pdeathsig, when that thread ends, so a test binary that crashes or is
// killed takes its gateways with it), and each child leads a process
// group of its own, which the kill signals whole. LiveProcesses says how
// many have not been reaped, for tests that check nothing outlives them.
//
// Concurrency: a gatewayProc's fields are set before it is shared, but
// for killed, raced (atomic) and err (read once done is closed); a
// lineWriter's lock is taken alone; Cluster.gmu guards Cluster.procs.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// processMemberTTL is the gateway command's member TTL (jsengine's
// default, 10 s: --engine nats has no setting for it). The live bucket's
// TTL is fixed by the engine that creates it, so in a cluster with a
// gateway process the other gateways use it too.
const processMemberTTL = 10 * time.Second

// processReadyTimeout bounds a gateway process's start: its engine's own
// start is bounded at 15 s by the command.
const processReadyTimeout = 60 * time.Second

// listeningLine is what the gateway command logs once it serves.
const listeningLine = `msg="switchyard gateway listening"`

// BuildGateway builds the gateway command into dir and returns the
// binary's path. It is built with -race when this binary is: the
// packages are then those go test -race compiled already (built without,
// a build cache that holds only the race builds, as after go test -race
// ./... on a fresh machine, compiles them all again), the scenario ran as
// fast with it, and a race the child reports fails the run (see
// ProcessFailures). The go command is the one on PATH (go test puts its
// own first); it runs within this module.
func BuildGateway(ctx context.Context, dir string) (string, error) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("faults: build the gateway: %w", err)
	}
	bin := filepath.Join(dir, "switchyard-gateway")
	if runtime.GOOS == "windows" {
		bin += ".exe"
	}
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.CommandContext(ctx, goCmd, append(args, "github.com/switchyard/switchyard/cmd/gateway")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("faults: go build ./cmd/gateway: %w\n%s", err, out)
	}
	return bin, nil
}

// gatewayProc is one run of the gateway command.
type gatewayProc struct {
	name   string // "gateway 2 (pid 1234)"
	pid    int
	killed atomic.Bool // set before Kill9Gateway or Close signals it
	raced  atomic.Bool // it reported a data race
	ready  chan struct{}
	done   chan struct{} // closed once reaped
	err    error         // Wait's, set before done is closed
	kill   func()        // signals the process group
}

// live is the gateway processes started and not yet reaped.
var live struct {
	mu sync.Mutex
	m  map[*gatewayProc]struct{}
}

// LiveProcesses is how many gateway processes have been started and not
// yet reaped.
func LiveProcesses() int {
	live.mu.Lock()
	defer live.mu.Unlock()
	return len(live.m)
}

// KillProcesses kills every gateway process not yet reaped and waits for
// each (within 30 s); it returns how many there were. For a test's
// cleanup after a run that did not close its cluster.
func KillProcesses() int {
	live.mu.Lock()
	ps := make([]*gatewayProc, 0, len(live.m))
	for p := range live.m {
		ps = append(ps, p)
	}
	live.mu.Unlock()
	for _, p := range ps {
		_ = p.stop()
	}
	return len(ps)
}

// startProc starts bin with args, its output to out (each line prefixed
// with the process's name), and returns once it is started (not yet
// ready: see waitReady).
func startProc(g int, bin string, args []string, out io.Writer) (*gatewayProc, error) {
	p := &gatewayProc{ready: make(chan struct{}), done: make(chan struct{})}
	lw := &lineWriter{out: out, ready: p.ready, raced: &p.raced, name: fmt.Sprintf("gateway %d", g)}
	started := make(chan error, 1)
	go func() { // exits once the process is reaped
		// The child's Pdeathsig fires when the thread that started it
		// ends: this goroutine keeps its thread until the child is
		// reaped (and the thread ends with it, still locked).
		runtime.LockOSThread()
		cmd := exec.Command(bin, args...)
		cmd.Env = childEnv()
		cmd.Stdout, cmd.Stderr = lw, lw // one writer: one Write at a time
		cmd.SysProcAttr = procAttr()
		// Its output pipes are closed this long after it exits, should
		// anything it started still hold them.
		cmd.WaitDelay = 5 * time.Second
		if err := cmd.Start(); err != nil {
			started <- err
			close(p.done)
			return
		}
		p.pid = cmd.Process.Pid
		p.name = fmt.Sprintf("gateway %d (pid %d)", g, p.pid)
		lw.setName(p.name)
		p.kill = func() { killGroup(cmd.Process) }
		live.mu.Lock()
		if live.m == nil {
			live.m = map[*gatewayProc]struct{}{}
		}
		live.m[p] = struct{}{}
		live.mu.Unlock()
		started <- nil
		p.err = cmd.Wait()
		live.mu.Lock()
		delete(live.m, p)
		live.mu.Unlock()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("faults: gateway %d: %w", g, err)
	}
	return p, nil
}

// childEnv is this process's environment without the gateway's settings
// (SWITCHYARD_*, which CI sets for other tests): a gateway process has
// only the flags it is given.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SWITCHYARD_") {
			env = append(env, kv)
		}
	}
	return env
}

// waitReady waits until the process logs that it listens; an error when
// it exits first, ctx ends or processReadyTimeout passes.
func (p *gatewayProc) waitReady(ctx context.Context) error {
	t := time.NewTimer(processReadyTimeout)
	defer t.Stop()
	select {
	case <-p.ready:
		return nil
	case <-p.done:
		return fmt.Errorf("%s exited before it listened: %v", p.name, p.err)
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return fmt.Errorf("%s logged no %s within %v", p.name, listeningLine, processReadyTimeout)
	}
}

// exitedOnItsOwn is how the process ended when it ended without being
// killed, else "".
func (p *gatewayProc) exitedOnItsOwn() string {
	select {
	case <-p.done:
		if !p.killed.Load() {
			return fmt.Sprintf("%s exited on its own: %v", p.name, p.err)
		}
	default:
	}
	return ""
}

// stop sends the process SIGKILL and waits until it is reaped (within
// 30 s). It fails if the process had ended before, on its own, or ended
// other than by the signal.
func (p *gatewayProc) stop() error {
	if msg := p.exitedOnItsOwn(); msg != "" {
		return errors.New(msg)
	}
	p.killed.Store(true)
	p.kill()
	t := time.NewTimer(30 * time.Second)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		return fmt.Errorf("%s not reaped 30 s after SIGKILL", p.name)
	}
	if !killedBySIGKILL(p.err) {
		return fmt.Errorf("%s ended otherwise than by SIGKILL: %v", p.name, p.err)
	}
	return nil
}

// startProcessGateway starts gateway g as a process of the gateway
// command on gw's links, listening on addr (a free loopback port when
// empty). A start that fails (its engine's start is bounded at 15 s, and a
// cluster just formed may still be placing its first streams) is made
// again, a second later, three times at most.
func (c *Cluster) startProcessGateway(ctx context.Context, gw *Gateway, urls []string, addr string) error {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 && !pause(ctx, time.Second) {
			break
		}
		a := addr
		if a == "" {
			ports, perr := freePorts(1)
			if perr != nil {
				return perr
			}
			a = fmt.Sprintf("127.0.0.1:%d", ports[0])
		}
		args := []string{"--engine", "nats", "--nats-url", strings.Join(urls, ","),
			"--nats-prefix", c.opts.Prefix, "--nats-replicas", fmt.Sprint(len(c.servers)),
			"--addr", a, "--log-level", "info", "--stats-interval", "-1s",
			// The in-process gateways' group policy (startGateway).
			"--ack-timeout", "3s", "--max-attempts", "5", "--backoff-min", "100ms", "--backoff-max", "500ms"}
		var p *gatewayProc
		if p, err = startProc(gw.I, c.opts.Binary, args, c.opts.ProcessOutput); err != nil {
			return err
		}
		if err = p.waitReady(ctx); err == nil {
			gw.proc, gw.Addr = p, a
			c.gmu.Lock()
			c.procs = append(c.procs, p)
			c.gmu.Unlock()
			return nil
		}
		if p.exitedOnItsOwn() == "" { // still running: it goes first
			if serr := p.stop(); serr != nil {
				return errors.Join(err, serr)
			}
		}
	}
	return fmt.Errorf("faults: gateway %d: %w", gw.I, err)
}

// Kill9Gateway sends gateway process g SIGKILL (see the file comment)
// and returns once it is reaped, its NATS links closed. It fails if g is
// not a process, or had ended before on its own.
func (c *Cluster) Kill9Gateway(g int) error {
	c.gmu.Lock()
	gw := c.gateways[g]
	c.gmu.Unlock()
	if gw.proc == nil {
		return fmt.Errorf("faults: gateway %d is not a process", g)
	}
	err := gw.proc.stop()
	gw.killed = true
	gw.closeLinks()
	return err
}

// ProcessFailures says which of the cluster's gateway processes, those
// running and those killed, ended on their own (not killed by the
// cluster), with their exit status, and which reported a data race.
func (c *Cluster) ProcessFailures() []string {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	var out []string
	for _, p := range c.procs {
		if msg := p.exitedOnItsOwn(); msg != "" {
			out = append(out, msg)
		}
		if p.raced.Load() {
			out = append(out, p.name+" reported a data race (see its output)")
		}
	}
	return out
}

// lineWriter takes a process's output: it closes ready at the first
// listening line, sets raced at a race detector's report, and writes each
// line, prefixed with the process's name, to out (when not nil).
type lineWriter struct {
	out   io.Writer
	ready chan struct{}
	raced *atomic.Bool

	mu    sync.Mutex // guards the fields below
	name  string
	line  []byte
	found bool
}

func (w *lineWriter) setName(name string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.name = name
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			// A line longer than 64 KiB is cut there.
			w.line = append(w.line, p[:min(len(p), max(0, 64<<10-len(w.line)))]...)
			break
		}
		w.line = append(w.line, p[:i]...)
		p = p[i+1:]
		if !w.found && bytes.Contains(w.line, []byte(listeningLine)) {
			w.found = true
			close(w.ready)
		}
		if bytes.HasPrefix(w.line, []byte("WARNING: DATA RACE")) {
			w.raced.Store(true)
		}
		if w.out != nil {
			fmt.Fprintf(w.out, "%s: %s\n", w.name, w.line)
		}
		w.line = w.line[:0]
	}
	return n, nil
}
