package mqtt

import (
	"bytes"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"
)

// TestAppendPublishAlias: a shared PUBLISH frame given a Topic Alias, with
// and without its topic name, decodes (with the codec) to the same packet
// with the alias set and the topic kept or emptied; its packet identifier
// is where the offset returned says; a remaining length that grows past
// one byte is re-encoded; PublishTopic reads the frame's topic.
func TestAppendPublishAlias(t *testing.T) {
	cases := []struct {
		name    string
		qos     byte
		payload string
		props   packets.Properties
	}{
		{"QoS 0 no properties", 0, "hi", packets.Properties{}},
		{"QoS 1 with properties", 1, "x", packets.Properties{ContentType: "text/plain", MessageExpiryInterval: 9,
			User: []packets.UserProperty{{Key: "k", Val: "v"}}}},
		{"QoS 2 grows the length", 2, strings.Repeat("p", 120), packets.Properties{}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pk := packets.Packet{TopicName: "a/b/c", Payload: []byte(c.payload), Properties: c.props,
				FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: c.qos}}
			frame, err := EncodePublishFrame(pk, Version5)
			if err != nil {
				t.Fatal(err)
			}
			if tp, ok := PublishTopic(frame); !ok || string(tp) != "a/b/c" {
				t.Fatalf("PublishTopic %q %v", tp, ok)
			}
			for _, withTopic := range []bool{true, false} {
				prefix := []byte{0xee}
				out, idAt, ok := AppendPublishAlias(prefix, frame, 7, withTopic)
				if !ok {
					t.Fatal("not rewritten")
				}
				got := out[1:]
				if n, spanID, ok := Span(got); !ok || n != len(got) || spanID != idAt {
					t.Fatalf("Span %d %d %v; packet %d bytes, id at %d", n, spanID, ok, len(got), idAt)
				}
				if c.qos > 0 {
					PatchPublish(got, idAt, false, 0x1234)
				}
				dec, n, err := DecodePacket(got, Version5, 1<<20)
				if err != nil || n != len(got) {
					t.Fatalf("decode: %v (%d of %d bytes)", err, n, len(got))
				}
				want := "a/b/c"
				if !withTopic {
					want = ""
				}
				if dec.TopicName != want || dec.Properties.TopicAlias != 7 || string(dec.Payload) != c.payload ||
					dec.FixedHeader.Qos != c.qos {
					t.Fatalf("withTopic %v: topic %q alias %d payload %q qos %d", withTopic, dec.TopicName,
						dec.Properties.TopicAlias, dec.Payload, dec.FixedHeader.Qos)
				}
				if c.qos > 0 && dec.PacketID != 0x1234 {
					t.Fatalf("packet id %#x", dec.PacketID)
				}
				if dec.Properties.ContentType != c.props.ContentType || dec.Properties.MessageExpiryInterval != c.props.MessageExpiryInterval ||
					len(dec.Properties.User) != len(c.props.User) {
					t.Fatalf("properties %+v, want %+v", dec.Properties, c.props)
				}
			}
		})
	}

	frame, _ := EncodePublishFrame(packets.Packet{TopicName: "t", FixedHeader: packets.FixedHeader{Type: packets.Publish}}, Version5)
	for name, in := range map[string][]byte{"not a PUBLISH": {packets.Pingresp << 4, 0}, "cut short": frame[:3]} {
		if out, _, ok := AppendPublishAlias(nil, in, 1, true); ok || out != nil {
			t.Fatalf("%s: rewritten", name)
		}
	}
	if _, _, ok := AppendPublishAlias(nil, frame, 0, true); ok {
		t.Fatal("alias 0 rewritten")
	}
	if !bytes.Equal(frame[:2], []byte{packets.Publish << 4, byte(len(frame) - 2)}) {
		t.Fatal("frame changed")
	}
}

// BenchmarkAppendPublishAlias: a session writer's copy of a shared MQTT 5
// PUBLISH (64-byte payload), plain and with a topic alias set or used.
func BenchmarkAppendPublishAlias(b *testing.B) {
	frame, err := EncodePublishFrame(packets.Packet{TopicName: "sensors/room1/temperature", Payload: make([]byte, 64),
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1}}, Version5)
	if err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 256)
	b.Run("copy", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			dst = append(dst[:0], frame...)
		}
	})
	for _, withTopic := range []bool{true, false} {
		b.Run(map[bool]string{true: "alias-set", false: "alias-used"}[withTopic], func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, ok := PublishTopic(frame); !ok {
					b.Fatal("no topic")
				}
				dst, _, _ = AppendPublishAlias(dst[:0], frame, 3, withTopic)
			}
		})
	}
}
