package faults

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGatewayProcessHelper is a helper, not a test: the tests below run
// the test binary again with FAULTS_HELPER=1 and one of its subtests,
// for a stand-in for the gateway command.
func TestGatewayProcessHelper(t *testing.T) {
	if os.Getenv("FAULTS_HELPER") == "" {
		t.Skip("helper process for the gateway process tests")
	}
	// gateway logs the gateway command's listening line and waits to be
	// killed (10 minutes at most).
	t.Run("gateway", func(t *testing.T) {
		fmt.Fprintln(os.Stderr, `time=now level=INFO msg="switchyard gateway listening" addr=127.0.0.1:1`)
		<-time.After(10 * time.Minute)
	})
	// exit ends at once with status 3.
	t.Run("exit", func(t *testing.T) {
		fmt.Fprintln(os.Stderr, "gateway: something went wrong")
		os.Exit(3)
	})
	// parent starts a gateway stand-in as the cluster does, prints its
	// pid once it is ready, and waits to be killed.
	t.Run("parent", func(t *testing.T) {
		p, err := startProc(0, os.Args[0], helperArgs("gateway"), nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := p.waitReady(context.Background()); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("child %d\n", p.pid)
		<-time.After(10 * time.Minute)
	})
}

func helperArgs(sub string) []string {
	return []string{"-test.run=^TestGatewayProcessHelper$/^" + sub + "$", "-test.count=1"}
}

// A gateway process is ready at its listening line, SIGKILL ends it and
// it is reaped; one that exits on its own is told as such, and its stop
// fails.
func TestGatewayProcessKill(t *testing.T) {
	t.Setenv("FAULTS_HELPER", "1")
	out := &clipLog{head: 4 << 10}
	p, err := startProc(2, os.Args[0], helperArgs("gateway"), out)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.waitReady(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := LiveProcesses(); n != 1 {
		t.Errorf("%d live processes, want 1", n)
	}
	if err := p.stop(); err != nil {
		t.Fatal(err)
	}
	if n := LiveProcesses(); n != 0 {
		t.Errorf("%d live processes after the kill, want 0", n)
	}
	if msg := p.exitedOnItsOwn(); msg != "" {
		t.Errorf("a killed process: %s", msg)
	}
	if want := fmt.Sprintf("gateway 2 (pid %d): time=now", p.pid); !strings.Contains(out.String(), want) {
		t.Errorf("output %q, want a line starting %q", out.String(), want)
	}

	q, err := startProc(1, os.Args[0], helperArgs("exit"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := q.waitReady(context.Background()); err == nil || !strings.Contains(err.Error(), "exited before it listened: exit status 3") {
		t.Errorf("waitReady: %v, want it exited with status 3", err)
	}
	if msg := q.exitedOnItsOwn(); !strings.Contains(msg, "exited on its own: exit status 3") {
		t.Errorf("exitedOnItsOwn: %q", msg)
	}
	if err := q.stop(); err == nil {
		t.Errorf("stop of a process that had exited: no error")
	}
}

// A gateway process dies with the process that started it, even killed
// with SIGKILL (Pdeathsig): a test binary that crashes leaves no gateway
// running.
func TestGatewayProcessDiesWithParent(t *testing.T) {
	cmd := exec.Command(os.Args[0], helperArgs("parent")...)
	cmd.Env = append(os.Environ(), "FAULTS_HELPER=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	pid := make(chan int, 1)
	go func() { // exits with the parent's stdout
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "child "); ok {
				if n, err := strconv.Atoi(s); err == nil {
					pid <- n
				}
			}
		}
		exited <- cmd.Wait()
	}()
	var child int
	select {
	case child = <-pid:
	case err := <-exited:
		t.Fatalf("the parent exited first: %v", err)
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		t.Fatal("the parent printed no child within 60 s")
	}
	t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) }) // if it survived
	_ = cmd.Process.Kill()
	if err := <-exited; err == nil {
		t.Fatal("the parent exited cleanly, want killed")
	}
	// The gateway process's pidfd becomes readable once it has ended.
	fd, err := unix.PidfdOpen(child, 0)
	if errors.Is(err, unix.ESRCH) {
		return // ended and reaped already
	}
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for deadline := time.Now().Add(10 * time.Second); ; {
		n, err := unix.Poll(fds, int(max(0, time.Until(deadline).Milliseconds())))
		if errors.Is(err, unix.EINTR) && time.Now().Before(deadline) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			t.Fatalf("gateway process %d still runs 10 s after its parent was killed", child)
		}
		return
	}
}
