package router_test

// Topic aliases the gateway gives (mqtt_alias.go) and the client's
// Maximum Packet Size [MQTT-3.1.2-24]: no PUBLISH the client gets may be
// larger, alias property included.

import (
	"bufio"
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// readRawPacket reads the next whole packet's bytes from r, and decodes it.
func readRawPacket(t *testing.T, r *rawMQTT) ([]byte, packets.Packet) {
	t.Helper()
	_ = r.nc.SetReadDeadline(time.Now().Add(waitTimeout))
	var raw []byte
	b, err := r.br.ReadByte()
	if err != nil {
		t.Fatalf("reading a packet: %v", err)
	}
	raw = append(raw, b)
	rem, mult := 0, 1
	for i := 0; i < 4; i++ {
		c, err := r.br.ReadByte()
		if err != nil {
			t.Fatalf("reading a packet: %v", err)
		}
		raw = append(raw, c)
		rem += int(c&0x7f) * mult
		mult <<= 7
		if c&0x80 == 0 {
			break
		}
	}
	body := make([]byte, rem)
	if _, err := io.ReadFull(r.br, body); err != nil {
		t.Fatalf("reading a packet: %v", err)
	}
	raw = append(raw, body...)
	pk, err := mqtt.ReadPacket(bufio.NewReader(bytes.NewReader(raw)), 5, 1<<20)
	if err != nil {
		t.Fatalf("decoding % x: %v", raw, err)
	}
	return raw, pk
}

// aliasSizeClient connects a raw MQTT 5 client allowing 4 topic aliases
// with Maximum Packet Size maxSize, subscribed to filter at QoS 1.
func aliasSizeClient(t *testing.T, g *gateway, id string, maxSize uint32, filter string) *rawMQTT {
	t.Helper()
	r := dialRaw(t, g, "tcp", 5)
	pk := connectPacket(id, 30)
	pk.Properties.TopicAliasMaximum = 4
	pk.Properties.MaximumPacketSize = maxSize
	r.send(t, pk)
	if ack := r.expect(t, packets.Connack); ack.ReasonCode != 0 {
		t.Fatalf("CONNACK %#x", ack.ReasonCode)
	}
	if rc := r.subscribeID(t, 1, filter, 0); rc != 1 {
		t.Fatalf("SUBACK %#x", rc)
	}
	return r
}

// nextRawPublish reads the next PUBLISH's bytes, acknowledging it.
func nextRawPublish(t *testing.T, r *rawMQTT) ([]byte, packets.Packet) {
	t.Helper()
	raw, pk := readRawPacket(t, r)
	if pk.FixedHeader.Type != packets.Publish {
		t.Fatalf("got %s, want PUBLISH", packets.PacketNames[pk.FixedHeader.Type])
	}
	if pk.FixedHeader.Qos == 1 {
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Puback}, PacketID: pk.PacketID})
	}
	return raw, pk
}

// sizedPayload is a payload of a PUBLISH on a 1-byte topic whose packet
// without a topic alias is total bytes long, from a probe: probe bytes of
// payload made a packet of probeLen bytes with a topic alias and its
// name (3 bytes of property), both with 1-byte lengths.
func sizedPayload(probe, probeLen, total int) string {
	rem0 := probeLen - 3 - 2 // remaining length of the probe without the alias
	rem := total - 2
	if total-2 >= 128 {
		rem = total - 3
	}
	return strings.Repeat("x", probe+rem-rem0)
}

// expectWithin reads PUBLISH packets up to the one whose payload ends
// with end, failing on any larger than maxSize.
func expectWithin(t *testing.T, r *rawMQTT, maxSize int, end string) {
	t.Helper()
	for range 4 {
		raw, pk := nextRawPublish(t, r)
		if len(raw) > maxSize {
			t.Errorf("PUBLISH of %d bytes (topic %q, alias %d, payload %d bytes) past the client's Maximum Packet Size %d",
				len(raw), pk.TopicName, pk.Properties.TopicAlias, len(pk.Payload), maxSize)
		}
		if strings.Contains(string(pk.Payload), end) {
			return
		}
	}
	t.Fatalf("no PUBLISH with %q", end)
}

// TestMQTTSentTopicAliasUseKeepsMaximumPacketSize: a PUBLISH that fits
// the client's Maximum Packet Size without an alias, on a topic of one
// byte whose alias is set, would grow by 2 bytes with the alias property
// in place of the name: it must go within the Maximum Packet Size (with
// its name, or not at all), never past it.
func TestMQTTSentTopicAliasUseKeepsMaximumPacketSize(t *testing.T) {
	const maxSize = 120
	g := newGateway(t, withMQTT)
	r := aliasSizeClient(t, g, "alias-size-use", maxSize, "m")
	httpPublish(t, g, "m", "p")
	raw, pk := nextRawPublish(t, r)
	if pk.TopicName != "m" || pk.Properties.TopicAlias == 0 {
		t.Fatalf("first PUBLISH: topic %q alias %d, want m setting an alias", pk.TopicName, pk.Properties.TopicAlias)
	}
	// Exactly maxSize bytes without the alias.
	httpPublish(t, g, "m", sizedPayload(1, len(raw), maxSize))
	httpPublish(t, g, "m", "end")
	expectWithin(t, r, maxSize, "end")
}

// TestMQTTSentTopicAliasSetKeepsMaximumPacketSize: a topic's first
// PUBLISH of 128 bytes without an alias (Remaining Length 126) gets 3
// bytes of alias property and a Remaining Length of 2 bytes: 132 bytes.
// With a Maximum Packet Size of 131 it must go without the alias.
func TestMQTTSentTopicAliasSetKeepsMaximumPacketSize(t *testing.T) {
	const maxSize = 131
	g := newGateway(t, withMQTT)
	r := aliasSizeClient(t, g, "alias-size-set", maxSize, "+")
	httpPublish(t, g, "m", "p")
	raw, pk := nextRawPublish(t, r)
	if pk.TopicName != "m" || pk.Properties.TopicAlias == 0 {
		t.Fatalf("first PUBLISH: topic %q alias %d, want m setting an alias", pk.TopicName, pk.Properties.TopicAlias)
	}
	httpPublish(t, g, "n", sizedPayload(1, len(raw), 128))
	httpPublish(t, g, "m", "end")
	expectWithin(t, r, maxSize, "end")
}

// TestMQTTSentTopicAliasGroupDeliveryKeepsMaximumPacketSize: a shared
// subscription's delivery (with its own packet identifier, checked
// against the Maximum Packet Size when it was encoded) on a topic of one
// byte whose alias is set must not grow past the Maximum Packet Size
// with the alias either.
func TestMQTTSentTopicAliasGroupDeliveryKeepsMaximumPacketSize(t *testing.T) {
	const maxSize = 120
	g := newGateway(t, withMQTT)
	r := aliasSizeClient(t, g, "alias-size-group", maxSize, "$share/sizes/g")
	httpPublish(t, g, "g", "p")
	raw, pk := nextRawPublish(t, r)
	if pk.TopicName != "g" || pk.Properties.TopicAlias == 0 {
		t.Fatalf("first PUBLISH: topic %q alias %d, want g setting an alias", pk.TopicName, pk.Properties.TopicAlias)
	}
	httpPublish(t, g, "g", sizedPayload(1, len(raw), maxSize))
	httpPublish(t, g, "g", "end")
	expectWithin(t, r, maxSize, "end")
}
