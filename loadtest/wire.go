package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/coder/websocket"

	"github.com/switchyard/switchyard/internal/wire"
)

// The generator speaks the wire protocol directly, not through the client
// library, so that it measures the gateway rather than the library, and so
// that reading a delivery allocates nothing: frames are read into a reused
// buffer, split on '\n', and the few fields it needs are found by byte
// search.

var (
	keyOffset    = []byte(`"offset":`)
	keyPartition = []byte(`"partition":`)
	keyTopic     = []byte(`"topic":"`)
	keyData      = []byte(`"data":"` + payloadMark)
	keyAttempt   = []byte(`"attempt":`)
	keyFrom      = []byte(`"from":`)
	keyTo        = []byte(`"to":`)
	opMessage    = opKey(wire.OpMessage)
	opGap        = opKey(wire.OpGap)
	opPublished  = opKey(wire.OpPublished)
	opSubscribed = opKey(wire.OpSubscribed)
	opError      = opKey(wire.OpError)
	opWelcome    = opKey(wire.OpWelcome)
	newline      = []byte{'\n'}
)

// opKey is the start of a frame with op: the gateway writes "op" first.
func opKey(op string) []byte { return []byte(`"op":"` + op + `"`) }

// payloadMark starts every payload; the 19 digits after it are the
// publisher's send time in unix nanoseconds.
const payloadMark = "T"

// minPayload is the smallest payload: quotes, mark, 19 digits.
const minPayload = 2 + len(payloadMark) + 19

// isOp reports whether line is a frame with op; the gateway writes "op"
// first, so only the head of the line is searched.
func isOp(line, op []byte) bool {
	head := line
	if len(head) > 32 {
		head = head[:32]
	}
	return bytes.Contains(head, op)
}

// intAfter parses the integer that follows key in line.
func intAfter(line, key []byte) (int64, bool) {
	i := bytes.Index(line, key)
	if i < 0 {
		return 0, false
	}
	return parseInt(line[i+len(key):])
}

func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && b[0] == '-' {
		neg, b = true, b[1:]
	}
	var n int64
	i := 0
	for ; i < len(b) && b[i] >= '0' && b[i] <= '9'; i++ {
		n = n*10 + int64(b[i]-'0')
	}
	if i == 0 {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// topicIndex parses the number our topic names end with ("….t17").
func topicIndex(line []byte) (int, bool) {
	i := bytes.Index(line, keyTopic)
	if i < 0 {
		return 0, false
	}
	rest := line[i+len(keyTopic):]
	end := bytes.IndexByte(rest, '"')
	if end < 0 {
		return 0, false
	}
	name := rest[:end]
	j := len(name)
	for j > 0 && name[j-1] >= '0' && name[j-1] <= '9' {
		j--
	}
	n, ok := parseInt(name[j:])
	return int(n), ok
}

// sendTime parses the publisher's send time from a message's data.
func sendTime(line []byte) (int64, bool) {
	return intAfter(line, keyData)
}

// appendPublish appends a publish frame whose data is a JSON string of
// size bytes (quotes included) carrying now's unix nanoseconds.
func appendPublish(dst []byte, id int64, topic string, size int, now time.Time) []byte {
	dst = append(dst, `{"op":"`+wire.OpPublish+`","id":`...)
	dst = strconv.AppendInt(dst, id, 10)
	dst = append(dst, `,"topic":"`...)
	dst = append(dst, topic...)
	dst = append(dst, `","data":"`+payloadMark...)
	dst = fmt.Appendf(dst, "%019d", now.UnixNano())
	for range max(0, size-minPayload) {
		dst = append(dst, 'x')
	}
	return append(dst, `"}`...)
}

// smallBufferClient dials TCP connections with a small receive buffer, so
// that a slow reader pushes back on the gateway within seconds instead of
// after the kernel has buffered megabytes.
var smallBufferClient = &http.Client{Transport: &http.Transport{
	DialContext: (&net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 8<<10)
		})
		return errors.Join(err, serr)
	}}).DialContext,
}}

// dialGateway opens a WebSocket and waits for the welcome. With
// smallBuffer the socket's receive buffer is kept small.
func dialGateway(ctx context.Context, url string, smallBuffer bool) (*websocket.Conn, time.Duration, error) {
	var client *http.Client
	if smallBuffer {
		client = smallBufferClient
	}
	return dialGatewayWith(ctx, url, client)
}

// dialGatewayWith is dialGateway over client's connections (nil: the
// default client).
func dialGatewayWith(ctx context.Context, url string, client *http.Client) (*websocket.Conn, time.Duration, error) {
	start := time.Now()
	var opts *websocket.DialOptions
	if client != nil {
		opts = &websocket.DialOptions{HTTPClient: client}
	}
	conn, _, err := websocket.Dial(ctx, url, opts)
	if err != nil {
		return nil, 0, err
	}
	conn.SetReadLimit(-1)
	_, data, err := conn.Read(ctx)
	if err != nil {
		conn.CloseNow()
		return nil, 0, err
	}
	if !isOp(data, opWelcome) {
		conn.CloseNow()
		return nil, 0, fmt.Errorf("first frame is not a welcome: %.80s", data)
	}
	return conn, time.Since(start), nil
}

// readFrames calls line for every line of every text frame until the
// connection fails or line returns false. The buffer is reused; line must
// not keep it.
func readFrames(ctx context.Context, conn *websocket.Conn, line func([]byte) bool) error {
	return readFramesThen(ctx, conn, line, nil)
}

// readFramesThen is readFrames calling end, when not nil, after the last
// line of each text frame; it stops too when end returns false.
func readFramesThen(ctx context.Context, conn *websocket.Conn, line func([]byte) bool, end func() bool) error {
	var buf bytes.Buffer
	for {
		typ, r, err := conn.Reader(ctx)
		if err != nil {
			return err
		}
		buf.Reset()
		if _, err := buf.ReadFrom(r); err != nil {
			return err
		}
		if typ != websocket.MessageText {
			continue
		}
		data := buf.Bytes()
		for len(data) > 0 {
			var l []byte
			l, data, _ = bytes.Cut(data, newline)
			if len(l) > 0 && !line(l) {
				return nil
			}
		}
		if end != nil && !end() {
			return nil
		}
	}
}
