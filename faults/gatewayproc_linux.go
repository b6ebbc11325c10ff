package faults

// How a gateway process is started and killed on Linux (gatewayproc.go).

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

// procAttr puts the child in a process group of its own and has the
// kernel send it SIGKILL when the thread that started it ends.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup sends SIGKILL to the process group p leads.
func killGroup(p *os.Process) {
	if err := syscall.Kill(-p.Pid, syscall.SIGKILL); err != nil {
		_ = p.Kill()
	}
}

// killedBySIGKILL reports whether err, from Wait, says the process was
// ended by SIGKILL.
func killedBySIGKILL(err error) bool {
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return false
	}
	ws, ok := ee.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}
