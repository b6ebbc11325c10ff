package session

import (
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestCoalescingIdleSessionHoldsNoEndState: a session with write
// coalescing (WriteDelay) that has written a few messages and parked its
// writer holds no close state and no end channel, like one without: the
// writer's wait for more frames (linger) is over, and nobody waits on the
// session's end.
func TestCoalescingIdleSessionHoldsNoEndState(t *testing.T) {
	fs := newFakeSocket()
	s := newSession("c", Options{EncodeGap: testGap, WriteDelay: time.Millisecond, PingInterval: time.Hour}, fs.socket())
	// The writer starts as in startWriter, but nothing waits on its end
	// until the check: startWriter's own wait would make the end state.
	s.startWriter()
	for i := range 3 {
		if !s.Send(msg(1, int64(i), 0, DropOld)) {
			t.Fatal("Send refused")
		}
	}
	waitFor(t, "the messages written", func() bool { return len(fs.frames()) == 3 })
	waitFor(t, "the writer to park", parked(s))
	made := endStateMade(s)
	s.Close(websocket.StatusNormalClosure, "")
	<-s.endChan(stepWriterEnded)
	s.wg.Wait()
	if made {
		t.Fatal("an idle coalescing session holds its close state and end channels (made by its writer's linger)")
	}
}
