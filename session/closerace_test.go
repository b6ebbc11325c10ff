package session

import (
	"testing"

	"github.com/coder/websocket"
)

// TestCloseWhilePeerCloses: a Close that meets the peer's close frame
// (a gateway shutting down while its clients leave) ends the session
// cleanly, every time; under the race detector, the writer a Close
// starts is ordered before Run's wait for it.
func TestCloseWhilePeerCloses(t *testing.T) {
	for range 300 {
		rs := rawServe(t, Options{}, echo{})
		if _, err := rs.client.Write(maskedFrame(0x80|opClose, "\x03\xe8")); err != nil {
			t.Fatal(err)
		}
		rs.sess.Close(websocket.StatusGoingAway, "shutting down")
		<-rs.sess.Done()
	}
}
