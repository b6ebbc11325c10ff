//go:build !linux

package session

// idleReaders is the number of goroutines n idle sessions run: one reader
// each, waiting for its socket.
func idleReaders(n int) int { return n }
