package mqtt

import (
	"bufio"
	"bytes"
	"fmt"
	"testing"

	paho "github.com/eclipse/paho.golang/packets"
	"github.com/mochi-mqtt/server/v2/packets"
)

// The benchmarks below compare the two kept codecs considered for the
// transport, github.com/eclipse/paho.golang/packets (MQTT 5 only) and
// github.com/mochi-mqtt/server/v2/packets (3.1, 3.1.1 and 5), with this
// package's layer on the latter. docs/mqtt.md records their figures.

func pahoPublish(qos byte) *paho.Publish {
	p := &paho.Publish{
		Topic:   "sensors/room1/temp",
		QoS:     qos,
		Payload: bytes.Repeat([]byte("x"), 256),
		Properties: &paho.Properties{
			ContentType: "text/plain",
			User:        []paho.User{{Key: "region", Value: "eu"}},
		},
	}
	if qos > 0 {
		p.PacketID = 9
	}
	return p
}

// BenchmarkEncodePublish: one PUBLISH encoded once, as Switchyard does per
// message and pattern.
func BenchmarkEncodePublish(b *testing.B) {
	var buf bytes.Buffer
	b.Run("paho/v5", func(b *testing.B) {
		p := pahoPublish(1)
		b.ReportAllocs()
		for b.Loop() {
			buf.Reset()
			if _, err := p.WriteTo(&buf); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, v := range []byte{Version311, Version5} {
		b.Run(fmt.Sprintf("mochi/v%d", v), func(b *testing.B) {
			pk := publishPacket(v, 1)
			b.ReportAllocs()
			for b.Loop() {
				buf.Reset()
				if err := pk.PublishEncode(&buf); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("EncodePublish/v%d", v), func(b *testing.B) {
			pk := publishPacket(v, 1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := EncodePublish(pk, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFanOut: one QoS 1 message written to 1000 sessions, each with
// its own packet identifier, into a connection's reused write buffer.
// "per-session" encodes the packet for every session, as a broker that
// keeps one packet struct per delivery does; "once" is EncodePublish once
// and AppendTo per session. ns/session is the cost each session adds.
func BenchmarkFanOut(b *testing.B) {
	const sessions = 1000
	var buf bytes.Buffer
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*sessions), "ns/session")
	}
	b.Run("paho-per-session/v5", func(b *testing.B) {
		p := pahoPublish(1)
		b.ReportAllocs()
		for b.Loop() {
			for s := range sessions {
				buf.Reset()
				p.PacketID = uint16(s + 1)
				if _, err := p.WriteTo(&buf); err != nil {
					b.Fatal(err)
				}
			}
		}
		report(b)
	})
	for _, v := range []byte{Version311, Version5} {
		b.Run(fmt.Sprintf("mochi-per-session/v%d", v), func(b *testing.B) {
			pk := publishPacket(v, 1)
			b.ReportAllocs()
			for b.Loop() {
				for s := range sessions {
					buf.Reset()
					pk.PacketID = uint16(s + 1)
					if err := pk.PublishEncode(&buf); err != nil {
						b.Fatal(err)
					}
				}
			}
			report(b)
		})
		b.Run(fmt.Sprintf("once/v%d", v), func(b *testing.B) {
			pk := publishPacket(v, 1)
			dst := make([]byte, 0, 4096)
			b.ReportAllocs()
			for b.Loop() {
				p, err := EncodePublish(pk, v)
				if err != nil {
					b.Fatal(err)
				}
				for s := range sessions {
					dst = p.AppendTo(dst[:0], Delivery{QoS: 1, PacketID: uint16(s + 1)})
				}
			}
			report(b)
		})
	}
}

// BenchmarkDecode: the packets a client sends, decoded from bytes.
func BenchmarkDecode(b *testing.B) {
	kinds := []struct {
		name string
		pk   func(v byte) packets.Packet
	}{
		{"connect", connectPacket},
		{"publish", func(v byte) packets.Packet { return publishPacket(v, 1) }},
		{"subscribe", subscribePacket},
	}
	for _, k := range kinds {
		b.Run("paho/v5/"+k.name, func(b *testing.B) {
			wire := encodeWith(b, k.pk(Version5))
			r := bytes.NewReader(wire)
			b.ReportAllocs()
			for b.Loop() {
				r.Reset(wire)
				if _, err := paho.ReadPacket(r); err != nil {
					b.Fatal(err)
				}
			}
		})
		for _, v := range []byte{Version311, Version5} {
			b.Run(fmt.Sprintf("mochi-DecodePacket/v%d/%s", v, k.name), func(b *testing.B) {
				wire := encodeWith(b, k.pk(v))
				b.ReportAllocs()
				for b.Loop() {
					if _, _, err := DecodePacket(wire, v, MaxPacketBytes); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.Run(fmt.Sprintf("mochi-ReadPacket/v%d/%s", v, k.name), func(b *testing.B) {
				wire := encodeWith(b, k.pk(v))
				r := bytes.NewReader(wire)
				br := bufio.NewReader(r)
				b.ReportAllocs()
				for b.Loop() {
					r.Reset(wire)
					br.Reset(r)
					if _, err := ReadPacket(br, v, MaxPacketBytes); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
