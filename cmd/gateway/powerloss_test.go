package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
)

// powerLossRecords is how many records the traced process appends.
const powerLossRecords = 200

// TestPowerLossKeepsAcknowledged runs the embedded server and engine in a
// child process under strace, appends records pipelined (the WebSocket
// publish path) and prints each acknowledgement, then kills the child
// with SIGKILL. Replaying the trace (crashsim_test.go), it rebuilds the
// data directory as a power loss would leave it at three moments (the
// first acknowledgement, the middle one, the last) from the synced data
// only, starts a server on each and reads the log back:
//
//   - --data-sync always (the default): every record acknowledged before
//     the moment is there;
//   - --data-sync 2m: it reports what is lost, and fails unless something
//     acknowledged is (else the simulation could not tell the two apart);
//   - both: the live state (what a crash of the process leaves) keeps
//     every acknowledged record, which checks the replay itself.
//
// What it proves: the server syncs the data of a record before the
// acknowledgement leaves it, under the default, on this kernel and
// filesystem. What it does not: that the disk honours the sync, or that
// directory entries are synced (see crashsim_test.go).
func TestPowerLossKeepsAcknowledged(t *testing.T) {
	strace, err := exec.LookPath("strace")
	if err != nil {
		skipWithoutStrace(t, "needs strace to record the server's writes and syncs")
	}
	for _, tt := range []struct {
		sync     string
		wantLoss bool
	}{{defaultDataSync, false}, {"2m", true}} {
		t.Run(tt.sync, func(t *testing.T) {
			dir, traceFile := t.TempDir(), filepath.Join(t.TempDir(), "trace")
			runTracedAppends(t, strace, dir, traceFile, tt.sync)
			f, err := os.Open(traceFile)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			type moment struct {
				acked       int
				synced, all snapshot
			}
			var moments []moment
			acked := 0
			_, err = replayTrace(f, dir, func(s *diskState, out []byte) {
				acked += bytes.Count(out, []byte("acked "))
				if n := len(moments); acked > 0 && (n == 0 || (n == 1 && acked >= powerLossRecords/2) || (n == 2 && acked == powerLossRecords)) {
					moments = append(moments, moment{acked, s.state(true), s.state(false)})
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(moments) != 3 {
				t.Fatalf("%d acknowledgements in the trace, want %d", acked, powerLossRecords)
			}
			for _, m := range moments {
				if got := recoverRecords(t, m.all); got < m.acked {
					t.Errorf("process crash after %d acknowledgements: %d records recovered (the replay loses writes)", m.acked, got)
				}
				got := recoverRecords(t, m.synced)
				t.Logf("--data-sync %s, power loss after %d acknowledgements: %d records recovered", tt.sync, m.acked, got)
				if !tt.wantLoss && got < m.acked {
					t.Errorf("power loss after %d acknowledgements: %d recovered, %d acknowledged records lost", m.acked, got, m.acked-got)
				}
				if tt.wantLoss && m.acked == powerLossRecords && got >= m.acked {
					t.Errorf("power loss after %d acknowledgements: nothing lost with --data-sync %s; the simulation cannot tell syncing from not", m.acked, tt.sync)
				}
			}
		})
	}
}

// runTracedAppends runs TestPowerLossProcess under strace with --data-sync
// sync on dir, recording into traceFile, and kills it once it has printed
// every acknowledgement.
func runTracedAppends(t *testing.T, strace, dir, traceFile, sync string) {
	t.Helper()
	args := append(straceArgs(traceFile), os.Args[0], "-test.run=^TestPowerLossProcess$", "-test.count=1")
	cmd := exec.Command(strace, args...)
	cmd.Env = append(os.Environ(), "SYTEST_POWERLOSS_DIR="+dir, "SYTEST_POWERLOSS_SYNC="+sync)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exit := make(chan error, 1)
	lines := make(chan string, 16)
	go func() { // ends with the child's stdout
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	var child int
	deadline := time.After(2 * time.Minute)
	for child == 0 {
		select {
		case l, ok := <-lines:
			if !ok {
				err := cmd.Wait()
				if out := stderr.String(); strings.Contains(out, "ptrace") || strings.Contains(out, "PTRACE") {
					skipWithoutStrace(t, "strace cannot trace here: "+out)
				}
				t.Fatalf("traced process ended early: %v\n%s", err, stderr.String())
			}
			if p, ok := strings.CutPrefix(l, "done "); ok {
				child, _ = strconv.Atoi(p)
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("traced process did not finish its appends\n%s", stderr.String())
		}
	}
	// The crash: no graceful stop, nothing flushed on the way out.
	if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range lines { // until the child's stdout closes
	}
	go func() { exit <- cmd.Wait() }() // strace exits with its child
	select {
	case <-exit:
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill()
		<-exit
		t.Fatal("strace did not exit after its child was killed")
	}
}

// recoverRecords starts a server on a copy of the snapshot and counts the
// records of the test's topic, from offset 0 with no gap.
func recoverRecords(t *testing.T, sn snapshot) int {
	t.Helper()
	dir := t.TempDir()
	if err := sn.writeTo(dir); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	emb, err := startEmbeddedNATS(dir, "", dataSync{Always: true}, log)
	if err != nil {
		t.Fatalf("server on the recovered directory: %v", err)
	}
	defer emb.stop()
	e, err := newEmbeddedEngine(powerLossConfig(dir), emb, engine.TopicConfig{Partitions: 1}, engine.GroupPolicy{}, log)
	if err != nil {
		t.Fatalf("engine on the recovered directory: %v", err)
	}
	defer e.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	recs, _, err := e.Read(ctx, "powerloss", 0, 0, powerLossRecords+1)
	if err != nil {
		return 0 // the topic itself was lost
	}
	n := 0
	for _, r := range recs {
		if r.Offset != int64(n) || string(r.Data) != "r"+strconv.Itoa(n) {
			break
		}
		n++
	}
	return n
}

func powerLossConfig(dir string) config {
	var cfg config
	cfg.DataDir = dir
	cfg.JetStream.Prefix = "powerloss"
	return cfg
}

// TestPowerLossProcess is a helper, not a test: TestPowerLossKeepsAcknowledged
// runs the test binary again under strace with SYTEST_POWERLOSS_DIR set. It
// appends powerLossRecords records pipelined, printing "acked N" for each
// acknowledgement as it comes, then "done PID" and waits to be killed.
func TestPowerLossProcess(t *testing.T) {
	dir := os.Getenv("SYTEST_POWERLOSS_DIR")
	if dir == "" {
		t.Skip("helper process for TestPowerLossKeepsAcknowledged")
	}
	sync, err := parseDataSync(os.Getenv("SYTEST_POWERLOSS_SYNC"))
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	emb, err := startEmbeddedNATS(dir, "", sync, log)
	if err != nil {
		t.Fatal(err)
	}
	e, err := newEmbeddedEngine(powerLossConfig(dir), emb, engine.TopicConfig{Partitions: 1}, engine.GroupPolicy{}, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "powerloss", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	aa, ok := e.(engine.AsyncAppender)
	if !ok {
		t.Fatal("the embedded engine does not pipeline appends")
	}
	acks := make(chan error, powerLossRecords)
	for i := range powerLossRecords {
		m := engine.Message{Topic: "powerloss", Data: []byte("r" + strconv.Itoa(i))}
		aa.AppendAsync(ctx, m, func(a engine.Appended, err error) {
			if err == nil {
				// One write per acknowledgement: the trace's marker.
				_, err = os.Stdout.WriteString("acked " + strconv.FormatInt(a.Offset, 10) + "\n")
			}
			acks <- err
		})
	}
	for range powerLossRecords {
		if err := <-acks; err != nil {
			t.Fatal(err)
		}
	}
	fmt.Printf("done %d\n", os.Getpid())
	<-time.After(5 * time.Minute) // killed before
	t.Fatal("not killed")
}

// skipWithoutStrace skips a test that needs strace, or fails it when
// SWITCHYARD_REQUIRE_STRACE=1 (CI, which installs it).
func skipWithoutStrace(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("SWITCHYARD_REQUIRE_STRACE") == "1" {
		t.Fatal(why)
	}
	t.Skip(why)
}
