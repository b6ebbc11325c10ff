//go:build !unix

package session

import "errors"

// lazySupported reports whether lazyReader can read a socket through its
// syscall.RawConn on this platform: not here, so Accept keeps net/http's
// buffers.
const lazySupported = false

func readFD(uintptr, []byte) (int, error) { return 0, errors.ErrUnsupported }

func peekWouldBlock(uintptr) bool { return false }
