package router

import "github.com/switchyard/switchyard/session"

// The ping op is a liveness check for clients that cannot send WebSocket
// pings (a browser's WebSocket answers the gateway's pings but cannot send
// its own, and cannot see them): {"op":"ping","id":…} is answered with
// {"op":"pong","id":…}, in order after the replies to the requests before
// it. A client that hears nothing for a while sends one; no reply within
// its timeout means the connection died without a close (docs/protocol.md,
// "ping").

// ping answers the ping op.
func (cn *conn) ping(req *request) *protoError {
	cn.sess.Send(session.Item{Frame: encodeReply("pong", req.ID, nil)})
	return nil
}
