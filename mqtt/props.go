package mqtt

import (
	"fmt"

	"github.com/mochi-mqtt/server/v2/packets"
)

// AppendSubscriptionID appends a Subscription Identifier property of id
// (1 to 268,435,455) to b.
func AppendSubscriptionID(b []byte, id int) []byte {
	return appendLength(append(b, packets.PropSubscriptionIdentifier), id)
}

// WithPublishProps returns a copy of pkt, an MQTT 5 PUBLISH this process
// encoded (EncodePublish, EncodePublishFrame), with the encoded properties
// props put first among its properties. It is how a session's own
// properties (its subscription identifiers) join a PUBLISH encoded once
// for every session: one allocation of the exact size, and pkt is left
// as it was.
func WithPublishProps(pkt, props []byte) ([]byte, error) {
	n, _, ok := Span(pkt)
	if !ok || n != len(pkt) || pkt[0]>>4 != packets.Publish {
		return nil, fmt.Errorf("%w: not one PUBLISH", ErrMalformed)
	}
	hdr := 2
	for pkt[hdr-1]&0x80 != 0 {
		hdr++
	}
	at := hdr + 2 + (int(pkt[hdr])<<8 | int(pkt[hdr+1])) // after the topic
	if pkt[0]&0x06 != 0 {
		at += 2 // the packet identifier
	}
	plen, k, ok := readLength(pkt[at:])
	if !ok || at+k+plen > len(pkt) {
		return nil, fmt.Errorf("%w: PUBLISH properties", ErrMalformed)
	}
	newProps := plen + len(props)
	rem := len(pkt) - hdr - k + lengthBytes(newProps) + len(props)
	if rem > MaxPacketBytes-5 {
		return nil, fmt.Errorf("mqtt: adding PUBLISH properties: %w: %d bytes", ErrTooLarge, rem)
	}
	out := make([]byte, 0, 1+lengthBytes(rem)+rem)
	out = append(out, pkt[0])
	out = appendLength(out, rem)
	out = append(out, pkt[hdr:at]...)
	out = appendLength(out, newProps)
	out = append(out, props...)
	out = append(out, pkt[at+k:]...)
	return out, nil
}

// readLength reads a variable byte integer at the start of b and returns
// it with the number of bytes it took.
func readLength(b []byte) (n, k int, ok bool) {
	mult := 1
	for k = 0; k < 4 && k < len(b); k++ {
		n += int(b[k]&0x7f) * mult
		mult <<= 7
		if b[k]&0x80 == 0 {
			return n, k + 1, true
		}
	}
	return 0, 0, false
}
