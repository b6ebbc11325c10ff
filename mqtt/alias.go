package mqtt

import "github.com/mochi-mqtt/server/v2/packets"

// PublishTopic returns the topic name of the PUBLISH at the start of pkt
// (a whole packet, as Span reads it), aliasing pkt; ok is false when pkt
// is not a PUBLISH or is cut short.
func PublishTopic(pkt []byte) (topic []byte, ok bool) {
	at, ok := publishBody(pkt)
	if !ok {
		return nil, false
	}
	return pkt[at+2 : at+2+(int(pkt[at])<<8|int(pkt[at+1]))], true
}

// publishBody returns the offset of the variable header (the topic's
// length) of the PUBLISH at the start of pkt, checking that its topic
// lies within it.
func publishBody(pkt []byte) (int, bool) {
	if len(pkt) < 2 || pkt[0]>>4 != packets.Publish {
		return 0, false
	}
	i := 1
	for ; i < len(pkt) && i <= 4 && pkt[i]&0x80 != 0; i++ {
	}
	if i >= len(pkt) || i > 4 {
		return 0, false
	}
	at := i + 1
	if at+2 > len(pkt) || at+2+(int(pkt[at])<<8|int(pkt[at+1])) > len(pkt) {
		return 0, false
	}
	return at, true
}

// AppendPublishAlias appends to dst the MQTT 5 PUBLISH pkt (a whole
// packet without a Topic Alias property, as EncodePublishFrame makes)
// with the Topic Alias alias, and with its topic name only when
// withTopic: the first packet a connection gets under an alias carries
// both, which sets it, and the later ones an empty topic name, which uses
// it. The flags, packet identifier, other properties and payload are
// copied as they are. It returns the extended slice and the offset of the
// packet identifier within the packet appended (0 for QoS 0), for
// PatchPublish; ok is false, and dst unchanged, when pkt is not such a
// packet or alias is 0.
//
// It is the one copy a session's writer makes of a shared packet anyway,
// so an alias costs no encoding and no copy beyond it.
func AppendPublishAlias(dst, pkt []byte, alias uint16, withTopic bool) (out []byte, idAt int, ok bool) {
	at, ok := publishBody(pkt)
	if !ok || alias == 0 {
		return dst, 0, false
	}
	tlen := int(pkt[at])<<8 | int(pkt[at+1])
	p := at + 2 + tlen // the packet identifier, or the properties' length
	idLen := 0
	if pkt[0]&0x06 != 0 {
		idLen = 2
	}
	pl := p + idLen
	props, mult, i := 0, 1, pl
	for ; ; i++ {
		if i >= len(pkt) || i >= pl+4 {
			return dst, 0, false
		}
		props += int(pkt[i]&0x7f) * mult
		mult <<= 7
		if pkt[i]&0x80 == 0 {
			break
		}
	}
	rest := i + 1 // the properties, then the payload
	if rest+props > len(pkt) {
		return dst, 0, false
	}
	newProps := props + 3
	newTopic := 0
	if withTopic {
		newTopic = tlen
	}
	rem := 2 + newTopic + idLen + lengthBytes(newProps) + len(pkt) - rest + 3
	if rem > MaxPacketBytes-5 {
		return dst, 0, false
	}
	dst = append(dst, pkt[0])
	dst = appendLength(dst, rem)
	start := len(dst) - 1 - lengthBytes(rem)
	dst = append(dst, byte(newTopic>>8), byte(newTopic))
	if withTopic {
		dst = append(dst, pkt[at+2:p]...)
	}
	if idLen > 0 {
		idAt = len(dst) - start
		dst = append(dst, pkt[p], pkt[p+1])
	}
	dst = appendLength(dst, newProps)
	dst = append(dst, packets.PropTopicAlias, byte(alias>>8), byte(alias))
	dst = append(dst, pkt[rest:]...)
	return dst, idAt, true
}
