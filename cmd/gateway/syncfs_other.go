//go:build !linux

package main

import (
	"errors"
	"os"
)

// canSyncfs: no syncfs(2) here; --data-sync always has the server sync
// after every write instead.
const canSyncfs = false

func syncfs(*os.File) error { return errors.New("syncfs: not supported on this platform") }
