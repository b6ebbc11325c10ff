//go:build !linux

package faults

// How a gateway process is started and killed elsewhere than on Linux
// (gatewayproc.go): no process group and no Pdeathsig, so a test binary
// that crashes leaves its gateway processes running.

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

func procAttr() *syscall.SysProcAttr { return nil }

// killGroup kills p (SIGKILL on Unix).
func killGroup(p *os.Process) { _ = p.Kill() }

// killedBySIGKILL reports whether err, from Wait, says the process was
// ended by a signal or a kill.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	return errors.As(err, &ee)
}
