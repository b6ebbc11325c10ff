package client

// Delta-compressed subscriptions (SubscribeOptions.Delta). The gateway
// sends a (topic, partition)'s first message full and then, while the
// subscription receives every message of it, the Fossil delta of each
// payload against the one before, marked "delta":true; its data is a JSON
// string of the delta's bytes, or their base64 with "encoding":"base64".
// The reader applies each delta to the partition's last payload before
// anything else happens to the message (even one the client then drops
// for MaxPending was received, and is the gateway's next base), so every
// Message carries the whole payload. A gap, a resubscribe or a deleted
// topic forgets the partition's payload: the gateway's next message of it
// is full.

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/centrifugal/fdelta"

	"github.com/switchyard/switchyard/internal/wire"
)

// applyDelta turns a delta subscription's message frame f into the full
// message in place and keeps its payload as the partition's base. An error
// (wrapping ErrProtocol) means f is a delta without its base or one that
// does not apply.
func (s *Subscription) applyDelta(f *inFrame) error {
	k := partKey{f.Topic, f.Partition}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bases == nil {
		s.bases = make(map[partKey][]byte)
	}
	if !f.Delta {
		if f.Encoding == wire.EncodingBase64 {
			delete(s.bases, k) // bytes are never a base
		} else {
			s.bases[k] = f.Data // the frame's own copy, not shared
		}
		return nil
	}
	base, ok := s.bases[k]
	if !ok {
		return fmt.Errorf("%w: delta message of %s/%d at offset %d without the message before it", ErrProtocol, f.Topic, f.Partition, f.Offset)
	}
	d, err := deltaBytes(f.Data, f.Encoding)
	if err != nil {
		return err
	}
	out, err := fdelta.Apply(base, d)
	if err != nil {
		delete(s.bases, k)
		return fmt.Errorf("%w: delta message of %s/%d at offset %d: %v", ErrProtocol, f.Topic, f.Partition, f.Offset, err)
	}
	s.bases[k] = out
	// The handler gets its own copy: a base it changed would corrupt the
	// next payload.
	f.Data, f.Encoding, f.Delta = json.RawMessage(append([]byte(nil), out...)), "", false
	return nil
}

// deltaBytes decodes a delta message's data.
func deltaBytes(data json.RawMessage, encoding string) ([]byte, error) {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%w: delta data is not a string: %v", ErrProtocol, err)
	}
	if encoding != wire.EncodingBase64 {
		return []byte(s), nil
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("%w: delta data: %v", ErrProtocol, err)
	}
	return b, nil
}

// forgetBase forgets a partition's payload (a gap: the next message is full).
func (s *Subscription) forgetBase(topic string, partition int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.bases, partKey{topic, partition})
}

// forgetBases forgets every payload (a resubscribe).
func (s *Subscription) forgetBases() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.bases)
}

// deltaFailed reports a delta the client could not apply and drops the
// connection: the reader handles no further frame of it (a later message
// would advance positions past the failed one), and the reconnect resumes
// every subscription from its positions, where the gateway starts each
// partition again with a full message.
func (c *Client) deltaFailed(err error) {
	c.disp.push(event{kind: evError, err: err})
	c.mu.Lock()
	conn := c.conn
	c.mu.Unlock()
	if conn != nil {
		c.deltaFailedOn.Store(conn)
		conn.CloseNow() // the reader sees it and reconnects
	}
}
