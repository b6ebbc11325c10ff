package mqtt

import (
	"bufio"
	"bytes"
	"slices"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestWithPublishProps: subscription identifiers spliced into a PUBLISH
// encoded once decode with the packet's own properties, topic, packet
// identifier and payload unchanged, at each QoS and across a remaining
// length that grows a byte; the shared packet is left as it was.
func TestWithPublishProps(t *testing.T) {
	for _, tc := range []struct {
		name    string
		qos     byte
		payload int
		ids     []int
	}{
		{"qos0", 0, 5, []int{1}},
		{"qos1 two ids", 1, 10, []int{7, 300000}},
		{"qos2 the remaining length grows a byte", 2, 99, []int{268435455}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pk := packets.Packet{TopicName: "a/b", Payload: bytes.Repeat([]byte("x"), tc.payload),
				FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: tc.qos}}
			pk.Properties.ContentType = "text/plain"
			pk.Properties.User = []packets.UserProperty{{Key: "k", Val: "v"}}
			b, err := EncodePublishFrame(pk, Version5)
			if err != nil {
				t.Fatal(err)
			}
			if tc.payload == 99 && b[1]&0x80 != 0 {
				t.Fatalf("remaining length %d, want 127 before the splice", len(b)-2)
			}
			orig := slices.Clone(b)
			var props []byte
			for _, id := range tc.ids {
				props = AppendSubscriptionID(props, id)
			}
			out, err := WithPublishProps(b, props)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b, orig) {
				t.Fatal("the shared packet changed")
			}
			if n, idAt, ok := Span(out); !ok || n != len(out) || (tc.qos > 0) != (idAt > 0) {
				t.Fatalf("Span = %d, %d, %v of %d bytes", n, idAt, ok, len(out))
			}
			got, err := ReadPacket(bufio.NewReader(bytes.NewReader(out)), Version5, MaxPacketBytes)
			if err != nil {
				t.Fatal(err)
			}
			if got.TopicName != "a/b" || !bytes.Equal(got.Payload, pk.Payload) || got.Properties.ContentType != "text/plain" ||
				len(got.Properties.User) != 1 || !slices.Equal(got.Properties.SubscriptionIdentifier, tc.ids) {
				t.Fatalf("decoded %q %d bytes %+v", got.TopicName, len(got.Payload), got.Properties)
			}
		})
	}
}

// TestDecodeDisconnectReasonOnly: an MQTT 5 DISCONNECT of remaining
// length 1 (a reason code, no properties [MQTT-3.14.2.1]) keeps its
// reason; the codec read it only when properties followed.
func TestDecodeDisconnectReasonOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    []byte
		want byte
	}{
		{"reason only", []byte{packets.Disconnect << 4, 1, 0x04}, 0x04},
		{"reason and no properties", []byte{packets.Disconnect << 4, 2, 0x04, 0}, 0x04},
		{"nothing", []byte{packets.Disconnect << 4, 0}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pk, n, err := DecodePacket(tc.b, Version5, MaxPacketBytes)
			if err != nil || n != len(tc.b) || pk.ReasonCode != tc.want {
				t.Fatalf("DecodePacket = reason %#x, %d bytes, %v; want %#x", pk.ReasonCode, n, err, tc.want)
			}
		})
	}
}
