//go:build !linux

package session

// Other platforms have no idle poller: an idle reader waits on its own
// goroutine (idlepoll_linux.go).

func (s *Session) park() bool { return false }

func (ps *parkState) arm() bool { return false }

func (ps *parkState) unpark() {}

// IdlePollerStats reports the sockets parked in the idle poller now and
// how many times it has fallen back: none here.
func IdlePollerStats() (parked int, fallbacks uint64) { return 0, 0 }
