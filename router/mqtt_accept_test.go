package router_test

import (
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
)

// flakyListener fails its first Accept as a process out of file
// descriptors does (EMFILE), then accepts as its listener does.
type flakyListener struct {
	net.Listener
	failed atomic.Bool
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if !l.failed.Swap(true) {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// TestMQTTAcceptSurvivesEMFILE: an accept error other than the
// listener's close (out of file descriptors, for a moment) does not stop
// the MQTT listener: a client connects after it.
func TestMQTTAcceptSurvivesEMFILE(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &flakyListener{Listener: ln}
	g := newGateway(t, func(c *gwConfig) { c.router.MQTT.Listener = fl })
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "after-emfile", 30)
}
