package mqtt

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/trie"
)

// FuzzDecodePacket feeds arbitrary bytes to the decoder at each protocol
// level. Nothing may panic; DecodePacket and ReadPacket must agree; a
// PUBLISH that decodes must survive EncodePublish and decode again to the
// same packet. Run it with
//
//	go test -run '^$' -fuzz FuzzDecodePacket -fuzztime 60s ./mqtt/
func FuzzDecodePacket(f *testing.F) {
	for _, v := range []byte{Version31, Version311, Version5} {
		f.Add(v, encodeWith(f, connectPacket(v)))
		f.Add(v, encodeWith(f, subscribePacket(v)))
		f.Add(v, encodeWith(f, publishPacket(v, 0)))
		f.Add(v, encodeWith(f, publishPacket(v, 2)))
	}
	for _, in := range [][]byte{
		{0x30, 0xff, 0xff, 0xff, 0x7f}, {0x30, 0x80, 0x80, 0x80, 0x80, 0x00}, {0x36, 0x00},
		{0x82, 0x06, 0x00, 0x01, 0x00, 0x00, 0x01, 'a'}, {0x30, 0x06, 0x00, 0x01, 'a', 0x02, 0x7f, 0x00},
		{0xe0, 0x00}, {0xc0, 0x00}, {0xa2, 0x05, 0x00, 0x01, 0x00, 0x01, 'a'},
	} {
		f.Add(Version5, in)
	}
	f.Fuzz(func(t *testing.T, version byte, data []byte) {
		version = Version31 + version%3
		const limit = 1 << 16
		pk, n, err := DecodePacket(data, version, limit)
		if n < 0 || n > len(data) || (err == nil) != (n > 0) {
			t.Fatalf("DecodePacket took %d of %d bytes, err %v", n, len(data), err)
		}
		rp, rerr := ReadPacket(bufio.NewReader(bytes.NewReader(data)), version, limit)
		if (err == nil) != (rerr == nil) || err != nil && errors.Is(err, ErrMalformed) != errors.Is(rerr, ErrMalformed) {
			t.Fatalf("DecodePacket: %v; ReadPacket: %v", err, rerr)
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrTooLarge) && err != io.ErrUnexpectedEOF {
				t.Fatalf("unexpected error kind: %v", err)
			}
			return
		}
		if rp.FixedHeader != pk.FixedHeader || rp.TopicName != pk.TopicName || !bytes.Equal(rp.Payload, pk.Payload) {
			t.Fatalf("fixed headers differ: %+v and %+v", rp.FixedHeader, pk.FixedHeader)
		}
		if size, _, ok := Span(data); !ok || size != n {
			t.Fatalf("Span = %d, %v; DecodePacket took %d", size, ok, n)
		}
		if pk.FixedHeader.Type != packets.Publish {
			return
		}
		p, err := EncodePublish(pk, pk.ProtocolVersion)
		if err != nil {
			return // a property the codec accepted but no PUBLISH may carry out
		}
		fh := pk.FixedHeader
		out := p.AppendTo(nil, Delivery{QoS: fh.Qos, Dup: fh.Dup, Retain: fh.Retain, PacketID: pk.PacketID})
		if fh.Qos > 0 {
			// The queued form: EncodePublishFrame, then a session's
			// identifier and DUP patched at the offset Span finds.
			frame, err := EncodePublishFrame(pk, pk.ProtocolVersion)
			if err != nil {
				t.Fatal(err)
			}
			own := bytes.Clone(frame)
			size, idAt, ok := Span(own)
			if !ok || size != len(own) || idAt == 0 {
				t.Fatalf("Span of a QoS %d frame = %d, %d, %v", fh.Qos, size, idAt, ok)
			}
			PatchPublish(own, idAt, fh.Dup, pk.PacketID)
			if fh.Retain {
				own[0] |= 1
			}
			if !bytes.Equal(own, out) {
				t.Fatalf("patched frame differs from AppendTo:\n%x\n%x", own, out)
			}
		}
		again, m, err := DecodePacket(out, version, MaxPacketBytes)
		if err != nil || m != len(out) {
			t.Fatalf("re-encoded PUBLISH does not decode: %v (%d of %d bytes)\n%x", err, m, len(out), out)
		}
		if again.FixedHeader.Qos != fh.Qos || again.FixedHeader.Dup != fh.Dup || again.FixedHeader.Retain != fh.Retain || again.TopicName != pk.TopicName || again.PacketID != pk.PacketID ||
			!bytes.Equal(again.Payload, pk.Payload) || !slices.Equal(again.Properties.User, pk.Properties.User) ||
			again.Properties.ContentType != pk.Properties.ContentType {
			t.Fatalf("re-encoded PUBLISH differs:\n%+v\n%+v", again, pk)
		}
	})
}

// FuzzTopicMapping: any string is either refused as an MQTT topic name
// (ErrInvalidTopic) or maps to a valid native topic and back to itself;
// and any string that is a native topic either has no MQTT name or maps
// there and back to itself.
func FuzzTopicMapping(f *testing.F) {
	for _, s := range []string{"sensors/room1/temp", "/", "a//b", "room 1", "température", ":x", "$", "$SYS/a",
		"a/$b", ":", "::3A", ":abc", "$:", "a.::2B", strings.Repeat("é/", 20)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		native, err := TopicToNative(s)
		switch {
		case err != nil && !errors.Is(err, ErrInvalidTopic):
			t.Fatalf("TopicToNative(%q): %v", s, err)
		case err == nil:
			if verr := trie.ValidateTopic(native); verr != nil {
				t.Fatalf("TopicToNative(%q) = %q: %v", s, native, verr)
			}
			if back, err := TopicFromNative(native); err != nil || back != s {
				t.Fatalf("TopicFromNative(%q) = %q, %v; want %q", native, back, err, s)
			}
		}
		if trie.ValidateTopic(s) != nil {
			return
		}
		name, err := TopicFromNative(s)
		switch {
		case err != nil && !errors.Is(err, ErrNoMQTTName):
			t.Fatalf("TopicFromNative(%q): %v", s, err)
		case err == nil:
			if again, err := TopicToNative(name); err != nil || again != s {
				t.Fatalf("TopicToNative(%q) = %q, %v; want %q", name, again, err, s)
			}
		}
	})
}

// FuzzAppendPublishAlias: whatever the packet, AppendPublishAlias does
// not panic; what it writes is one whole packet whose identifier is where
// it says; a well-formed MQTT 5 PUBLISH without an alias comes out
// decoding to the same packet with the alias, its topic kept or emptied.
func FuzzAppendPublishAlias(f *testing.F) {
	for q := byte(0); q <= 2; q++ {
		f.Add(encodeWith(f, publishPacket(Version5, q)), uint16(1), true)
		f.Add(encodeWith(f, publishPacket(Version5, q)), uint16(9), false)
	}
	f.Add([]byte{0x30, 0x06, 0x00, 0x01, 'a', 0x02, 0x7f, 0x00}, uint16(2), false)
	f.Add([]byte{0x32, 0x03, 0x00, 0x01, 'a'}, uint16(2), true)
	f.Fuzz(func(t *testing.T, data []byte, alias uint16, withTopic bool) {
		n, _, ok := Span(data)
		if !ok {
			return
		}
		pkt := data[:n]
		out, idAt, ok := AppendPublishAlias(nil, pkt, alias, withTopic)
		if !ok {
			return
		}
		m, spanID, ok := Span(out)
		if !ok || m != len(out) || spanID != idAt {
			t.Fatalf("out % x: Span %d %d %v, id at %d", out, m, spanID, ok, idAt)
		}
		in, _, err := DecodePacket(pkt, Version5, 1<<20)
		if err != nil || in.FixedHeader.Type != packets.Publish || in.Properties.TopicAliasFlag {
			return
		}
		got, _, err := DecodePacket(out, Version5, 1<<20)
		if err != nil {
			t.Fatalf("in % x decodes, out % x does not: %v", pkt, out, err)
		}
		want := in.TopicName
		if !withTopic {
			want = ""
		}
		if got.TopicName != want || got.Properties.TopicAlias != alias || !bytes.Equal(got.Payload, in.Payload) ||
			got.PacketID != in.PacketID || got.FixedHeader.Qos != in.FixedHeader.Qos {
			t.Fatalf("in % x, out % x: topic %q alias %d", pkt, out, got.TopicName, got.Properties.TopicAlias)
		}
	})
}
