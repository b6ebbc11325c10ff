package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	paho "github.com/eclipse/paho.golang/packets"
	"github.com/mochi-mqtt/server/v2/packets"
)

// encodeWith encodes pk with the codec, for test inputs.
func encodeWith(t testing.TB, pk packets.Packet) []byte {
	t.Helper()
	var b bytes.Buffer
	var err error
	switch pk.FixedHeader.Type {
	case packets.Connect:
		err = pk.ConnectEncode(&b)
	case packets.Subscribe:
		err = pk.SubscribeEncode(&b)
	case packets.Publish:
		err = pk.PublishEncode(&b)
	case packets.Pingreq:
		err = pk.PingreqEncode(&b)
	default:
		t.Fatalf("encodeWith: type %d", pk.FixedHeader.Type)
	}
	if err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func connectPacket(version byte) packets.Packet {
	pk := packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Connect}, ProtocolVersion: version}
	pk.Connect.ProtocolName = []byte("MQTT")
	if version == Version31 {
		pk.Connect.ProtocolName = []byte("MQIsdp")
	}
	pk.Connect.Clean = true
	pk.Connect.Keepalive = 30
	pk.Connect.ClientIdentifier = "client-1"
	pk.Connect.UsernameFlag, pk.Connect.Username = true, []byte("u")
	pk.Connect.PasswordFlag, pk.Connect.Password = true, []byte("jwt")
	return pk
}

func subscribePacket(version byte) packets.Packet {
	return packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Subscribe, Qos: 1},
		ProtocolVersion: version,
		PacketID:        7,
		Filters: packets.Subscriptions{
			{Filter: "sensors/+/temp", Qos: 1},
			{Filter: "$share/g/a/#", Qos: 2},
		},
	}
}

func publishPacket(version byte, qos byte) packets.Packet {
	pk := packets.Packet{
		FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos},
		ProtocolVersion: version,
		TopicName:       "sensors/room1/temp",
		Payload:         bytes.Repeat([]byte("x"), 256),
	}
	if qos > 0 {
		pk.PacketID = 9
	}
	if version == Version5 {
		pk.Properties.User = []packets.UserProperty{{Key: "region", Val: "eu"}}
		pk.Properties.ContentType = "text/plain"
	}
	return pk
}

func TestReadPacket(t *testing.T) {
	for _, v := range []byte{Version31, Version311, Version5} {
		t.Run(fmt.Sprint("v", v), func(t *testing.T) {
			var wire []byte
			wire = append(wire, encodeWith(t, connectPacket(v))...)
			wire = append(wire, encodeWith(t, subscribePacket(v))...)
			wire = append(wire, encodeWith(t, publishPacket(v, 1))...)
			wire = append(wire, encodeWith(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Pingreq}})...)
			check := func(t *testing.T, next func(version byte) (packets.Packet, error)) {
				pk, err := next(0)
				if err != nil || pk.FixedHeader.Type != packets.Connect || pk.ProtocolVersion != v ||
					pk.Connect.ClientIdentifier != "client-1" || string(pk.Connect.Password) != "jwt" {
					t.Fatalf("CONNECT: %+v, %v", pk.Connect, err)
				}
				pk, err = next(v)
				if err != nil || pk.PacketID != 7 || len(pk.Filters) != 2 ||
					pk.Filters[1].Filter != "$share/g/a/#" || pk.Filters[1].Qos != 2 {
					t.Fatalf("SUBSCRIBE: %+v, %v", pk.Filters, err)
				}
				pk, err = next(v)
				if err != nil || pk.TopicName != "sensors/room1/temp" || pk.PacketID != 9 || len(pk.Payload) != 256 {
					t.Fatalf("PUBLISH: %q %d %d, %v", pk.TopicName, pk.PacketID, len(pk.Payload), err)
				}
				if v == Version5 && (len(pk.Properties.User) != 1 || pk.Properties.ContentType != "text/plain") {
					t.Fatalf("PUBLISH properties: %+v", pk.Properties)
				}
				if pk, err = next(v); err != nil || pk.FixedHeader.Type != packets.Pingreq {
					t.Fatalf("PINGREQ: %v", err)
				}
				if _, err := next(v); err != io.EOF {
					t.Fatalf("at the end: %v, want io.EOF", err)
				}
			}
			t.Run("ReadPacket", func(t *testing.T) {
				r := bufio.NewReader(bytes.NewReader(wire))
				check(t, func(version byte) (packets.Packet, error) { return ReadPacket(r, version, 1024) })
			})
			t.Run("DecodePacket", func(t *testing.T) {
				rest := wire
				check(t, func(version byte) (packets.Packet, error) {
					if len(rest) == 0 {
						return packets.Packet{}, io.EOF
					}
					pk, n, err := DecodePacket(rest, version, 1024)
					rest = rest[n:]
					return pk, err
				})
			})
		})
	}
}

func TestReadPacketErrors(t *testing.T) {
	publish := encodeWith(t, publishPacket(Version311, 0))
	for _, tc := range []struct {
		name    string
		in      []byte
		version byte
		max     int
		want    error
	}{
		{"too large, announced", []byte{0x30, 0xff, 0xff, 0xff, 0x7f}, 4, 1 << 20, ErrTooLarge},
		{"too large by one byte", publish, 4, len(publish) - 1, ErrTooLarge},
		{"exactly the limit", publish, 4, len(publish), nil},
		{"five-byte length", []byte{0x30, 0x80, 0x80, 0x80, 0x80, 0x00}, 4, MaxPacketBytes, ErrMalformed},
		{"QoS 3", []byte{0x36, 0x00}, 4, 1024, ErrMalformed},
		{"reserved type", []byte{0x00, 0x00}, 4, 1024, ErrMalformed},
		{"SUBSCRIBE flags", []byte{0x80, 0x00}, 4, 1024, ErrMalformed},
		{"truncated length", []byte{0x30, 0x80}, 4, 1024, io.ErrUnexpectedEOF},
		{"truncated body", publish[:len(publish)-1], 4, 1024, io.ErrUnexpectedEOF},
		{"bad UTF-8 topic", []byte{0x30, 0x04, 0x00, 0x02, 0xc3, 0x28}, 4, 1024, ErrMalformed},
		{"PINGREQ with a body", []byte{0xc0, 0x01, 0x00}, 4, 1024, ErrMalformed},
		// The codec indexes past the end for this MQTT 5 SUBSCRIBE (a filter
		// without its options byte); see TestCodecSubscribePanics.
		{"v5 SUBSCRIBE without options", []byte{0x82, 0x06, 0x00, 0x01, 0x00, 0x00, 0x01, 'a'}, 5, 1024, ErrMalformed},
		{"unknown v5 property", []byte{0x30, 0x06, 0x00, 0x01, 'a', 0x02, 0x7f, 0x00}, 5, 1024, ErrMalformed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadPacket(bufio.NewReader(bytes.NewReader(tc.in)), tc.version, tc.max)
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("ReadPacket: %v, want %v", err, tc.want)
			}
			_, _, err = DecodePacket(tc.in, tc.version, tc.max)
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("DecodePacket: %v, want %v", err, tc.want)
			}
		})
	}
}

// TestCodecSubscribePanics documents why decodeBody recovers: the codec
// itself panics on this input. If a new codec version stops panicking,
// this test says so and the recover may go.
func TestCodecSubscribePanics(t *testing.T) {
	body := []byte{0x00, 0x01, 0x00, 0x00, 0x01, 'a'}
	defer func() {
		if recover() == nil {
			t.Fatal("the codec no longer panics on a v5 SUBSCRIBE without options")
		}
	}()
	pk := packets.Packet{ProtocolVersion: 5, FixedHeader: packets.FixedHeader{Type: packets.Subscribe, Qos: 1}}
	_ = pk.SubscribeDecode(body)
}

// TestEncodePublish: a Publish written per session decodes, with this
// codec and with Paho's independent one (MQTT 5), to what was encoded
// with the session's own flags and packet identifier.
func TestEncodePublish(t *testing.T) {
	for _, v := range []byte{Version311, Version5} {
		for _, d := range []Delivery{
			{QoS: 0}, {QoS: 0, Retain: true},
			{QoS: 1, PacketID: 1}, {QoS: 1, Dup: true, PacketID: 0xabcd},
			{QoS: 2, PacketID: 65535, Retain: true},
		} {
			t.Run(fmt.Sprintf("v%d/%+v", v, d), func(t *testing.T) {
				src := publishPacket(v, d.QoS)
				src.FixedHeader.Dup, src.FixedHeader.Retain = !d.Dup, !d.Retain // ignored
				p, err := EncodePublish(src, v)
				if err != nil {
					t.Fatal(err)
				}
				prefix := []byte("before")
				out := p.AppendTo(slices.Clone(prefix), d)
				if !bytes.Equal(out[:len(prefix)], prefix) || len(out) != len(prefix)+p.Len() {
					t.Fatalf("AppendTo changed the prefix or wrote %d bytes, Len says %d", len(out)-len(prefix), p.Len())
				}
				pk, n, err := DecodePacket(out[len(prefix):], v, MaxPacketBytes)
				if err != nil || n != p.Len() {
					t.Fatalf("DecodePacket: %v (took %d of %d)", err, n, p.Len())
				}
				fh := pk.FixedHeader
				if pk.TopicName != src.TopicName || !bytes.Equal(pk.Payload, src.Payload) || fh.Qos != d.QoS ||
					fh.Dup != d.Dup || fh.Retain != d.Retain || d.QoS > 0 && pk.PacketID != d.PacketID {
					t.Fatalf("decoded %+v id %d topic %q, want %+v", fh, pk.PacketID, pk.TopicName, d)
				}
				if v != Version5 {
					return
				}
				if len(pk.Properties.User) != 1 || pk.Properties.ContentType != "text/plain" {
					t.Fatalf("properties: %+v", pk.Properties)
				}
				cp, err := paho.ReadPacket(bytes.NewReader(out[len(prefix):]))
				if err != nil {
					t.Fatalf("Paho's decoder: %v", err)
				}
				pp := cp.Content.(*paho.Publish)
				if pp.Topic != src.TopicName || pp.QoS != d.QoS || pp.Duplicate != d.Dup || pp.Retain != d.Retain ||
					d.QoS > 0 && pp.PacketID != d.PacketID || pp.Properties.ContentType != "text/plain" ||
					!bytes.Equal(pp.Payload, src.Payload) {
					t.Fatalf("Paho decoded %s", pp)
				}
			})
		}
	}
}

func TestAppendToPanicsOnQoSMismatch(t *testing.T) {
	p, err := EncodePublish(publishPacket(Version311, 0), Version311)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("no panic delivering a QoS 0 encoding at QoS 1")
		}
	}()
	p.AppendTo(nil, Delivery{QoS: 1, PacketID: 1})
}

// TestEncodePublishMatchesCodec: EncodePublish writes the same bytes as
// the codec's own encoder for every PUBLISH property and both levels.
func TestEncodePublishMatchesCodec(t *testing.T) {
	full := packets.Properties{
		PayloadFormat: 1, PayloadFormatFlag: true,
		MessageExpiryInterval:  3600,
		ContentType:            "application/json",
		ResponseTopic:          "replies/a",
		CorrelationData:        []byte{0, 1, 2},
		SubscriptionIdentifier: []int{1, 300, 0, 268435455},
		TopicAlias:             5, TopicAliasFlag: true,
		User: []packets.UserProperty{{Key: "k", Val: "v"}, {Key: "", Val: "é"}},
	}
	for _, tc := range []struct {
		name    string
		props   packets.Properties
		payload []byte
	}{
		{"none", packets.Properties{}, []byte("hello")},
		{"all", full, bytes.Repeat([]byte{0xff}, 200)},
		{"empty payload", packets.Properties{ContentType: "x"}, nil},
		{"large payload", packets.Properties{}, make([]byte, 20000)},
	} {
		for _, v := range []byte{Version311, Version5} {
			for _, qos := range []byte{0, 1} {
				t.Run(fmt.Sprintf("%s/v%d/qos%d", tc.name, v, qos), func(t *testing.T) {
					pk := packets.Packet{
						FixedHeader:     packets.FixedHeader{Type: packets.Publish, Qos: qos},
						TopicName:       "a/b",
						Payload:         tc.payload,
						Properties:      tc.props,
						ProtocolVersion: v,
						Mods:            packets.Mods{AllowResponseInfo: true},
					}
					if qos > 0 {
						pk.PacketID = 0x1234
					}
					var want bytes.Buffer
					if err := pk.PublishEncode(&want); err != nil {
						t.Fatal(err)
					}
					p, err := EncodePublish(pk, v)
					if err != nil {
						t.Fatal(err)
					}
					got := p.AppendTo(nil, Delivery{QoS: qos, PacketID: 0x1234})
					if !bytes.Equal(got, want.Bytes()) {
						t.Fatalf("EncodePublish:\n%x\ncodec:\n%x", got, want.Bytes())
					}
					if cap(p.b) != len(p.b) {
						t.Fatalf("encoded into %d bytes of capacity for %d", cap(p.b), len(p.b))
					}
				})
			}
		}
	}
}
