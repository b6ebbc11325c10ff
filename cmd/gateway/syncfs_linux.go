//go:build linux

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// canSyncfs: Linux has syncfs(2), which syncs the filesystem holding a file.
const canSyncfs = true

// syncfs syncs the filesystem holding f: every file's written data and
// metadata, and the directory entries.
func syncfs(f *os.File) error {
	for {
		err := unix.Syncfs(int(f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}
