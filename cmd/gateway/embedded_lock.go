//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes an exclusive lock on dir/switchyard.lock, so that a
// second gateway started on the same --data-dir fails at once instead of
// writing the same JetStream files (which would corrupt them). The lock
// ends with the returned file's Close, or with the process.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "switchyard.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("data-dir %s is in use by another gateway", dir)
		}
		return nil, fmt.Errorf("data-dir: lock: %w", err)
	}
	return f, nil
}
