package session

// What a one-way session over a transport and an Upgraded keep beside the
// session itself: nothing NewOneWay or NewOneWayConn make, no net.Conn
// for NetConn, no vector after a binary write, and the IdleSocket of a
// one-way session in its own park state.

import (
	"context"
	"net"
	"testing"
	"unsafe"

	"github.com/coder/websocket"
)

// nopTransport is a TransportConn that does nothing.
type nopTransport struct{}

func (nopTransport) Write(context.Context, []byte) error      { return nil }
func (nopTransport) Close(websocket.StatusCode, string) error { return nil }
func (nopTransport) CloseNow() error                          { return nil }
func (nopTransport) Read()                                    {}
func nopWrite(context.Context, []byte) error                  { return nil }
func nopClose(websocket.StatusCode, string) error             { return nil }
func nopCloseNow() error                                      { return nil }

// TestOneWayMakesNothingBesideTheSession: NewOneWay and NewOneWayConn
// allocate what every session does (newSession) and nothing more: no
// channel for the transport's close, no method values over it.
func TestOneWayMakesNothingBesideTheSession(t *testing.T) {
	opts := Options{EncodeGap: testGap}
	base := testing.AllocsPerRun(50, func() { _ = newSession("x", opts, socket{}) })
	fns := testing.AllocsPerRun(50, func() {
		_ = NewOneWay("x", opts, Transport{Write: nopWrite, Close: nopClose, CloseNow: nopCloseNow})
	})
	var tc TransportConn = &nopTransport{}
	conn := testing.AllocsPerRun(50, func() { _ = NewOneWayConn("x", opts, tc) })
	// Against about 5 more before (the transport's struct, its close
	// channel, three method values); a pool's miss may add a fraction.
	if fns-base >= 0.5 || conn-base >= 0.5 {
		t.Fatalf("allocations: NewOneWay %v, NewOneWayConn %v; want %v, newSession's", fns, conn, base)
	}
}

// TestSessionStructFits632: a Session is at most 632 bytes. Past 512
// bytes an object with pointers carries an 8-byte malloc header, so the
// 640-byte size class holds 632 bytes of Session; at 640 it is allocated
// 704 (TestSessionStructFits640 lets that through).
func TestSessionStructFits632(t *testing.T) {
	if n := unsafe.Sizeof(Session{}); n > 632 {
		t.Fatalf("Session is %d bytes: with its malloc header past the 640-byte size class", n)
	}
}

// TestUpgradedFits80: an Upgraded fits the 80-byte size class with its
// NetConn inside it (the reader's message, the flags), and NetConn
// allocates nothing.
func TestUpgradedFits80(t *testing.T) {
	if n := unsafe.Sizeof(Upgraded{}); n > 80 {
		t.Fatalf("Upgraded is %d bytes, past the 80-byte size class", n)
	}
	u := &Upgraded{}
	var nc net.Conn
	if n := testing.AllocsPerRun(50, func() { nc = u.NetConn() }); n != 0 {
		t.Fatalf("NetConn allocates %v times, want 0", n)
	}
	_ = nc
}

// recordConn is a net.Conn that keeps what is written to it.
type recordConn struct {
	net.Conn
	b *[]byte
}

func (c recordConn) Write(p []byte) (int, error) {
	*c.b = append(*c.b, p...)
	return len(p), nil
}

// TestWriteBinaryKeepsNoVector: a binary frame written past the library
// leaves the writer holding no vector.
func TestWriteBinaryKeepsNoVector(t *testing.T) {
	var out []byte
	l := &lazyWriter{nc: recordConn{b: &out}}
	p := []byte("a payload")
	if err := l.writeBinary(p); err != nil {
		t.Fatal(err)
	}
	if want := append([]byte{0x82, byte(len(p))}, p...); string(out) != string(want) {
		t.Fatalf("wrote %x, want %x", out, want)
	}
	if l.vec != nil {
		t.Fatalf("the writer keeps a vector of cap %d after a binary write", cap(l.vec))
	}
}

// TestIdleSocketInOneWaySession: the IdleSocket of a one-way session is
// its own park state (Parked reports it), and one is refused for a
// session that parks its own reader.
func TestIdleSocketInOneWaySession(t *testing.T) {
	s := NewOneWayConn("x", Options{EncodeGap: testGap}, nopTransport{})
	p := newIdleSocket(s, nil, func() {})
	if unsafe.Pointer(p) != unsafe.Pointer(&s.parkState) {
		t.Fatal("the IdleSocket is not the session's park state")
	}
	p.parked.Store(true)
	if !s.Parked() {
		t.Fatal("Parked does not report the transport's reader")
	}
	p.parked.Store(false)
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a session that parks its own reader")
		}
	}()
	newIdleSocket(newSession("y", Options{EncodeGap: testGap}, socket{}), nil, func() {})
}
