package router

// The size of an idle MQTT session's own state, pinned: the session
// struct's class, the part only sessions with a stored record make, and
// nothing made for the session core's transport.

import (
	"testing"
	"unsafe"

	"github.com/switchyard/switchyard/mqtt"
	"github.com/switchyard/switchyard/session"
)

// TestMQTTIdleSessionStructFits352: an mqttSession fits the 352-byte size
// class (it was 384 bytes): the TCP wait is the IdleSocket's, the keep
// alive is the CONNECT's 16 bits, and what only a session with a stored
// record uses (keepFor, restoring, dup) is a part made for it
// (mqttStored). A field added later must find room or move to a part
// made on demand. Its pattern fits 64 bytes (it was 80).
func TestMQTTIdleSessionStructFits352(t *testing.T) {
	if n := unsafe.Sizeof(mqttSession{}); n > 352 {
		t.Fatalf("mqttSession is %d bytes, past the 352-byte size class: %d bytes allocated a session", n, sessionAllocBytes())
	}
	if n := unsafe.Sizeof(mqttStored{}); n > 32 {
		t.Fatalf("mqttStored is %d bytes, want at most 32", n)
	}
	// A pattern's subscription identifiers are made by the first (80 → 64
	// bytes).
	if n := unsafe.Sizeof(mqttPattern{}); n > 64 {
		t.Fatalf("mqttPattern is %d bytes, want at most 64", n)
	}
}

// TestMQTTTransportMakesNothing: the session core takes an mqttSession as
// its transport without a method value or closure over it.
func TestMQTTTransportMakesNothing(t *testing.T) {
	s := &mqttSession{version: mqtt.Version5}
	var tc session.TransportConn
	if n := testing.AllocsPerRun(50, func() { tc = (*mqttTransport)(s) }); n != 0 {
		t.Fatalf("the transport allocates %v times, want 0", n)
	}
	_ = tc
}

// TestMQTTWaitRestoreWithoutStoredPart: the end's wait for a restore of
// a session without a stored part finds none.
func TestMQTTWaitRestoreWithoutStoredPart(t *testing.T) {
	s := &mqttSession{rt: &Router{mq: &mqttState{}}}
	s.waitRestore()
	if s.mqttStored != nil {
		t.Fatal("waitRestore made a stored part")
	}
}
