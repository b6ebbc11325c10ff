package router

// An idle MQTT session's reader in the session package's idle poller
// (session.IdleSocket): parking, resuming, and the transport's close,
// which resumes a parked reader for it to meet the end. The reader's loop
// is mqtt_conn.go's readLoop.

import (
	"bufio"
	"context"

	"github.com/coder/websocket"
)

// mqttTransport is an mqttSession as its session's transport
// (session.TransportConn, session.NewOneWayConn): the session keeps one
// interface rather than a method value for each of its four operations,
// which every idle session would hold.
type mqttTransport mqttSession

// Write writes one batch (mqtt_write.go).
func (t *mqttTransport) Write(ctx context.Context, p []byte) error {
	return (*mqttSession)(t).write(ctx, p)
}

// Close is closeUnpark.
func (t *mqttTransport) Close(code websocket.StatusCode, reason string) error {
	return (*mqttSession)(t).closeUnpark(code, reason)
}

// CloseNow is closeNowUnpark.
func (t *mqttTransport) CloseNow() error { return (*mqttSession)(t).closeNowUnpark() }

// Read is the reader (readLoop, mqtt_conn.go).
func (t *mqttTransport) Read() { (*mqttSession)(t).readLoop() }

// resumeRead runs the reader of a parked session on the fresh goroutine
// the idle poller (or the connection's close) started: it reads the input
// at hand and parks again, or waits where it cannot park any more, until
// the session ends.
func (s *mqttSession) resumeRead() {
	for {
		s.takeReader()
		if !s.readBurst() {
			s.readEnded()
			return
		}
		if s.parkIdle() {
			return
		}
		s.waitInput() // not parked (the poller fell back): on this goroutine
	}
}

// parkIdle gives back the empty packet reader, flushes the session's
// Deferral, and parks the connection when it can, reporting whether it
// did: the goroutine must then return. It is called with nothing
// buffered.
func (s *mqttSession) parkIdle() bool {
	if s.br != nil {
		putMQTTReader(s.br) // empty: an idle session holds none
		s.br = nil
	}
	s.cn.flushDeferred() // before waiting for the socket (deferral.go)
	if s.idle == nil || s.rt.opts.Session.NoIdlePark {
		return false
	}
	if !s.parked {
		s.parked = true
		s.cn.sess.ReadParked() // before the first park: a resume may end the session at once
	}
	return s.idle.Park()
}

// takeReader takes a packet reader when the session holds none.
func (s *mqttSession) takeReader() {
	if s.br == nil {
		s.br = mqttReaders.Get().(*bufio.Reader)
		s.br.Reset(s.nc)
	}
}

// readEnded is the end of the reader: the keep alive stops, and a reader
// that parked ends the session itself, as the session's goroutine does
// when Transport.Read returns otherwise.
func (s *mqttSession) readEnded() {
	if s.ka != nil {
		s.ka.Stop()
	}
	if s.parked {
		s.cn.sess.ReadDone()
	}
}

// closeUnpark implements session.Transport.Close: close (mqtt_write.go),
// then the resume of a parked reader, whose read meets the end (closing a
// socket takes it out of the idle poller without an event).
func (s *mqttSession) closeUnpark(code websocket.StatusCode, reason string) error {
	err := s.close(code, reason)
	if s.idle != nil {
		s.idle.Unpark()
	}
	return err
}

// closeNowUnpark implements session.Transport.CloseNow as closeUnpark
// does Close.
func (s *mqttSession) closeNowUnpark() error {
	err := s.closeNow()
	if s.idle != nil {
		s.idle.Unpark()
	}
	return err
}
