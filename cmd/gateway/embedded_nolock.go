//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// lockDataDir opens dir/switchyard.lock without locking it: this platform
// has no flock, so nothing stops a second gateway on the same --data-dir.
func lockDataDir(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, "switchyard.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("data-dir: %w", err)
	}
	return f, nil
}
