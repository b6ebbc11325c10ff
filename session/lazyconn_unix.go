//go:build unix

package session

import "syscall"

// lazySupported reports whether lazyReader can read a socket through its
// syscall.RawConn on this platform.
const lazySupported = true

// readFD reads once from the non-blocking descriptor fd into p, retrying
// when interrupted.
func readFD(fd uintptr, p []byte) (int, error) {
	for {
		n, err := syscall.Read(int(fd), p)
		if err == syscall.EINTR {
			continue
		}
		if n < 0 {
			n = 0
		}
		return n, err
	}
}

// peekWouldBlock reports whether fd has nothing to read yet: a
// non-blocking one-byte peek would block. EOF and errors count as
// readable, for the read that follows to report.
func peekWouldBlock(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err == syscall.EINTR {
			continue
		}
		return err == syscall.EAGAIN
	}
}
