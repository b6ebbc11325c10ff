package mqtt

import (
	"bufio"
	"errors"
	"fmt"
	"io"

	"github.com/mochi-mqtt/server/v2/packets"
)

// Protocol levels of the CONNECT packet.
const (
	Version31  byte = 3 // MQTT 3.1
	Version311 byte = 4 // MQTT 3.1.1
	Version5   byte = 5 // MQTT 5.0
)

// MaxPacketBytes is the largest packet MQTT can express: a 4-byte
// remaining length of 268,435,455 plus the 5 bytes of fixed header.
const MaxPacketBytes = 268435455 + 5

// Sentinel errors of the packet layer.
var (
	// ErrMalformed: the bytes are not a well-formed MQTT packet. The error
	// also wraps the codec's packets.Code where it gave one, whose Code
	// field is the MQTT 5 reason code to answer with (0x81 malformed
	// packet, 0x82 protocol error, ...).
	ErrMalformed = errors.New("mqtt: malformed packet")
	// ErrTooLarge: the packet's size, read from its fixed header before
	// any of the rest is read or allocated, exceeds the limit. MQTT 5
	// answers with reason code 0x95 (packet too large).
	ErrTooLarge = errors.New("mqtt: packet too large")
)

// ReadPacket reads one packet from r and decodes it. version is the
// client's protocol level from its CONNECT (a CONNECT packet carries its
// own and sets pk.ProtocolVersion; pass 0 before it). maxBytes bounds the
// whole packet, fixed header included, as MQTT 5's Maximum Packet Size
// does; it is checked before the body is read, so the buffer allocated
// for a packet's body is never larger than maxBytes.
//
// The packet's strings and byte slices share one buffer that ReadPacket
// allocates for it alone and never reuses. A clean end of input before
// the first byte is io.EOF; one inside the packet is io.ErrUnexpectedEOF;
// bad bytes wrap ErrMalformed and an oversized packet wraps ErrTooLarge.
// After either of those the stream is out of step and must be closed.
func ReadPacket(r *bufio.Reader, version byte, maxBytes int) (packets.Packet, error) {
	hb, err := r.ReadByte()
	if err != nil {
		return packets.Packet{}, err
	}
	fh, err := readFixedHeader(hb, r.ReadByte, maxBytes)
	if err != nil {
		return packets.Packet{}, err
	}
	body := make([]byte, fh.Remaining)
	if _, err := io.ReadFull(r, body); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return packets.Packet{}, err
	}
	return decodeBody(fh, body, version)
}

// DecodePacket decodes the packet at the start of b, as ReadPacket does,
// and returns it with the number of bytes it took, so that a WebSocket
// message holding several packets is decoded by calling it again on the
// rest. If b holds only the start of a packet the error is
// io.ErrUnexpectedEOF (and n is 0), unless the fixed header already shows
// a packet larger than maxBytes. The packet's strings and byte slices
// alias b, which must therefore not be modified while they are in use.
func DecodePacket(b []byte, version byte, maxBytes int) (pk packets.Packet, n int, err error) {
	if len(b) == 0 {
		return packets.Packet{}, 0, io.ErrUnexpectedEOF
	}
	i := 1
	next := func() (byte, error) {
		if i >= len(b) {
			return 0, io.ErrUnexpectedEOF
		}
		i++
		return b[i-1], nil
	}
	fh, err := readFixedHeader(b[0], next, maxBytes)
	if err != nil {
		return packets.Packet{}, 0, err
	}
	if len(b)-i < fh.Remaining {
		return packets.Packet{}, 0, io.ErrUnexpectedEOF
	}
	end := i + fh.Remaining
	pk, err = decodeBody(fh, b[i:end:end], version)
	if err != nil {
		return pk, 0, err
	}
	return pk, end, nil
}

// readFixedHeader decodes the first byte hb and the remaining length,
// whose bytes next returns, and checks the size of the whole packet
// against maxBytes.
func readFixedHeader(hb byte, next func() (byte, error), maxBytes int) (packets.FixedHeader, error) {
	var fh packets.FixedHeader
	if hb>>4 == packets.Reserved {
		return fh, fmt.Errorf("%w: reserved packet type 0", ErrMalformed)
	}
	if err := fh.Decode(hb); err != nil {
		return fh, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	// The remaining length is a variable byte integer of 1 to 4 bytes.
	rem, mult := 0, 1
	for k := 0; ; k++ {
		if k == 4 {
			return fh, fmt.Errorf("%w: %w", ErrMalformed, packets.ErrMalformedVariableByteInteger)
		}
		c, err := next()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return fh, err
		}
		rem += int(c&0x7f) * mult
		mult <<= 7
		if c&0x80 == 0 {
			size := 1 + (k + 1) + rem
			if size > maxBytes {
				return fh, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, size, maxBytes)
			}
			fh.Remaining = rem
			return fh, nil
		}
	}
}

// decodeBody decodes a packet's variable header and payload with the
// codec. The codec indexes some inputs without checking their length (a
// MQTT 5 SUBSCRIBE whose last filter lacks its options byte makes it index
// past the end); such a panic is turned into ErrMalformed here, so that no
// input a client sends can crash the gateway.
func decodeBody(fh packets.FixedHeader, body []byte, version byte) (pk packets.Packet, err error) {
	defer func() {
		if r := recover(); r != nil {
			pk, err = packets.Packet{}, fmt.Errorf("%w: %v", ErrMalformed, r)
		}
	}()
	pk.FixedHeader = fh
	pk.ProtocolVersion = version
	switch fh.Type {
	case packets.Connect:
		err = pk.ConnectDecode(body)
	case packets.Connack:
		err = pk.ConnackDecode(body)
	case packets.Publish:
		err = pk.PublishDecode(body)
	case packets.Puback:
		err = pk.PubackDecode(body)
	case packets.Pubrec:
		err = pk.PubrecDecode(body)
	case packets.Pubrel:
		err = pk.PubrelDecode(body)
	case packets.Pubcomp:
		err = pk.PubcompDecode(body)
	case packets.Subscribe:
		err = pk.SubscribeDecode(body)
	case packets.Suback:
		err = pk.SubackDecode(body)
	case packets.Unsubscribe:
		err = pk.UnsubscribeDecode(body)
	case packets.Unsuback:
		err = pk.UnsubackDecode(body)
	case packets.Pingreq, packets.Pingresp:
		if len(body) != 0 {
			err = errors.New("PINGREQ and PINGRESP have no body")
		}
	case packets.Disconnect:
		err = pk.DisconnectDecode(body)
		if err == nil && version == Version5 && len(body) == 1 {
			// A reason code without properties: the codec reads the
			// reason only when properties follow [MQTT-3.14.2.1].
			pk.ReasonCode = body[0]
		}
	case packets.Auth:
		err = pk.AuthDecode(body)
	}
	if err != nil {
		return packets.Packet{}, fmt.Errorf("%w: %s: %w", ErrMalformed, packets.PacketNames[fh.Type], err)
	}
	return pk, nil
}

// Publish is a PUBLISH packet encoded once, for one protocol level and
// either QoS 0 or QoS 1 and 2, to be written to any number of sessions.
// Each session's packet differs only in its first byte (QoS, DUP and
// RETAIN flags) and its packet identifier, which AppendTo writes while
// copying; the topic, properties and payload are encoded once.
//
// A Publish is immutable and safe for concurrent use by multiple
// goroutines; copies share its bytes. The zero value is not a packet.
type Publish struct {
	b    []byte // the packet; flags 0 and packet identifier 0
	idAt int    // offset of the packet identifier; 0 for a QoS 0 packet
}

// Delivery is what one session's copy of a Publish carries of its own.
type Delivery struct {
	QoS      byte   // 0, 1 or 2: 0 exactly when the Publish was encoded for QoS 0
	Dup      bool   // a redelivery of a QoS 1 or 2 packet
	Retain   bool   // sent as a retained message
	PacketID uint16 // the session's packet identifier; ignored for QoS 0
}

// EncodePublish encodes pk, a PUBLISH with its TopicName, Payload and
// (for Version5) Properties set, for protocol level version, into one
// allocation of the exact size. It encodes a packet identifier field
// exactly when pk.FixedHeader.Qos is above 0; the flags and packet
// identifier of pk are otherwise ignored, since AppendTo writes each
// session's own. Of the properties, those MQTT allows on a PUBLISH are
// written, in the order the codec's own encoder writes them (the tests
// hold the two byte for byte equal).
//
// It is Switchyard's own encoder rather than the codec's PublishEncode
// because that one spends 80 % of its time looking each of the 27
// property kinds up in a map of maps (about 1 µs for an MQTT 5 PUBLISH
// against 0.3 µs here; docs/mqtt.md has the profile and the figures).
func EncodePublish(pk packets.Packet, version byte) (Publish, error) {
	topic, payload := pk.TopicName, pk.Payload
	if len(topic) > MaxMQTTNameBytes {
		return Publish{}, fmt.Errorf("mqtt: encoding PUBLISH: topic of %d bytes", len(topic))
	}
	props, err := publishPropsLen(&pk.Properties, version)
	if err != nil {
		return Publish{}, err
	}
	rem := 2 + len(topic) + len(payload)
	if pk.FixedHeader.Qos > 0 {
		rem += 2
	}
	if version == Version5 {
		rem += lengthBytes(props) + props
	}
	if rem > MaxPacketBytes-5 {
		return Publish{}, fmt.Errorf("mqtt: encoding PUBLISH: %w: %d bytes", ErrTooLarge, rem)
	}
	b := make([]byte, 0, 1+lengthBytes(rem)+rem)
	b = append(b, packets.Publish<<4)
	b = appendLength(b, rem)
	b = appendString(b, topic)
	var p Publish
	if pk.FixedHeader.Qos > 0 {
		p.idAt = len(b)
		b = append(b, 0, 0)
	}
	if version == Version5 {
		b = appendLength(b, props)
		b = appendPublishProps(b, &pk.Properties)
	}
	p.b = append(b, payload...)
	return p, nil
}

// publishPropsLen is the size of the PUBLISH properties of p, without
// their length prefix.
func publishPropsLen(p *packets.Properties, version byte) (int, error) {
	if version != Version5 {
		return 0, nil
	}
	n := 0
	str := func(s int) error {
		if s > MaxMQTTNameBytes {
			return fmt.Errorf("mqtt: encoding PUBLISH: a property of %d bytes", s)
		}
		n += 3 + s
		return nil
	}
	if p.PayloadFormatFlag {
		n += 2
	}
	if p.MessageExpiryInterval > 0 {
		n += 5
	}
	for _, s := range []int{len(p.ContentType), len(p.ResponseTopic), len(p.CorrelationData)} {
		if s > 0 {
			if err := str(s); err != nil {
				return 0, err
			}
		}
	}
	for _, id := range p.SubscriptionIdentifier {
		if id > 0 {
			n += 1 + lengthBytes(id)
		}
	}
	if p.TopicAliasFlag && p.TopicAlias > 0 {
		n += 3
	}
	for _, u := range p.User {
		if err := str(len(u.Key)); err != nil {
			return 0, err
		}
		if err := str(len(u.Val)); err != nil {
			return 0, err
		}
		n-- // one identifier byte for the pair, counted twice above
	}
	return n, nil
}

// appendPublishProps appends the PUBLISH properties of p that
// publishPropsLen counted.
func appendPublishProps(b []byte, p *packets.Properties) []byte {
	if p.PayloadFormatFlag {
		b = append(b, packets.PropPayloadFormat, p.PayloadFormat)
	}
	if v := p.MessageExpiryInterval; v > 0 {
		b = append(b, packets.PropMessageExpiryInterval, byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
	}
	if p.ContentType != "" {
		b = appendString(append(b, packets.PropContentType), p.ContentType)
	}
	if p.ResponseTopic != "" {
		b = appendString(append(b, packets.PropResponseTopic), p.ResponseTopic)
	}
	if len(p.CorrelationData) > 0 {
		b = appendString(append(b, packets.PropCorrelationData), string(p.CorrelationData))
	}
	for _, id := range p.SubscriptionIdentifier {
		if id > 0 {
			b = appendLength(append(b, packets.PropSubscriptionIdentifier), id)
		}
	}
	if p.TopicAliasFlag && p.TopicAlias > 0 {
		b = append(b, packets.PropTopicAlias, byte(p.TopicAlias>>8), byte(p.TopicAlias))
	}
	for _, u := range p.User {
		b = appendString(appendString(append(b, packets.PropUser), u.Key), u.Val)
	}
	return b
}

// appendString appends s with its two-byte length; s fits (checked by
// the caller).
func appendString(b []byte, s string) []byte {
	return append(append(b, byte(len(s)>>8), byte(len(s))), s...)
}

// appendLength appends n as a variable byte integer.
func appendLength(b []byte, n int) []byte {
	for {
		c := byte(n & 0x7f)
		n >>= 7
		if n == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// lengthBytes is the size of n as a variable byte integer.
func lengthBytes(n int) int {
	switch {
	case n < 128:
		return 1
	case n < 16384:
		return 2
	case n < 2097152:
		return 3
	}
	return 4
}

// Len is the size of the packet in bytes, to be checked against a
// client's Maximum Packet Size before it is sent.
func (p *Publish) Len() int { return len(p.b) }

// AppendTo appends the packet as delivered per d to dst and returns the
// extended slice. It allocates only if dst lacks the capacity. It panics
// if d.QoS is 0 for a Publish encoded for QoS 1 or 2 or the reverse, a
// mistake of the caller.
func (p *Publish) AppendTo(dst []byte, d Delivery) []byte {
	if (d.QoS == 0) != (p.idAt == 0) || d.QoS > 2 {
		panic(fmt.Sprintf("mqtt: Publish encoded with identifier at %d delivered at QoS %d", p.idAt, d.QoS))
	}
	start := len(dst)
	dst = append(dst, p.b...)
	f := packets.Publish<<4 | d.QoS<<1
	if d.Dup {
		f |= 1 << 3
	}
	if d.Retain {
		f |= 1
	}
	dst[start] = f
	if p.idAt > 0 {
		dst[start+p.idAt] = byte(d.PacketID >> 8)
		dst[start+p.idAt+1] = byte(d.PacketID)
	}
	return dst
}

// EncodePublishFrame is EncodePublish for a transport that writes packets
// from a queue of byte slices: it returns the packet with the QoS of
// pk.FixedHeader.Qos in its first byte and packet identifier 0, shared by
// every session it is queued to. A session's writer copies it and writes
// its own packet identifier at the offset Span reports (PatchPublish).
func EncodePublishFrame(pk packets.Packet, version byte) ([]byte, error) {
	p, err := EncodePublish(pk, version)
	if err != nil {
		return nil, err
	}
	p.b[0] = packets.Publish<<4 | pk.FixedHeader.Qos<<1
	return p.b, nil
}

// Span returns the length of the packet at the start of b, whose fixed
// header has been checked before (a packet this process encoded), and for
// a PUBLISH of QoS 1 or 2 the offset of its packet identifier (0
// otherwise). ok is false when b does not start with a whole packet.
func Span(b []byte) (n, idAt int, ok bool) {
	if len(b) < 2 {
		return 0, 0, false
	}
	rem, mult, i := 0, 1, 1
	for ; ; i++ {
		if i > 4 || i >= len(b) {
			return 0, 0, false
		}
		rem += int(b[i]&0x7f) * mult
		mult <<= 7
		if b[i]&0x80 == 0 {
			break
		}
	}
	n = i + 1 + rem
	if n > len(b) {
		return 0, 0, false
	}
	if b[0]>>4 == packets.Publish && b[0]&0x06 != 0 {
		at := i + 1
		if at+2 > n {
			return 0, 0, false
		}
		idAt = at + 2 + (int(b[at])<<8 | int(b[at+1]))
		if idAt+2 > n {
			return 0, 0, false
		}
	}
	return n, idAt, true
}

// PatchPublish sets the DUP flag and packet identifier of the PUBLISH pkt
// of QoS 1 or 2 (a copy of EncodePublishFrame's bytes) whose identifier
// is at idAt (Span).
func PatchPublish(pkt []byte, idAt int, dup bool, id uint16) {
	if dup {
		pkt[0] |= 1 << 3
	} else {
		pkt[0] &^= 1 << 3
	}
	pkt[idAt] = byte(id >> 8)
	pkt[idAt+1] = byte(id)
}
