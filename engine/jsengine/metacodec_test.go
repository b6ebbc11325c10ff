package jsengine

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/switchyard/switchyard/engine"
)

// wantMeta is the metadata header the engine wrote with encoding/json.
func wantMeta(t testing.TB, m *engine.Message) string {
	t.Helper()
	if m.Key == "" && len(m.Headers) == 0 && m.Priority == 0 {
		return ""
	}
	b, err := json.Marshal(recMeta{K: m.Key, H: m.Headers, P: m.Priority})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// checkDecode fails t unless decodeMeta(s) is what json.Unmarshal gives.
func checkDecode(t testing.TB, s string) {
	t.Helper()
	var want recMeta
	err := json.Unmarshal([]byte(s), &want)
	got, ok := decodeMeta(s)
	if ok != (err == nil) {
		t.Fatalf("decodeMeta(%q): ok %v, json.Unmarshal: %v", s, ok, err)
	}
	if ok && !reflect.DeepEqual(got, want) {
		t.Fatalf("decodeMeta(%q) = %#v, json.Unmarshal gives %#v", s, got, want)
	}
	if fast, ok := scanMeta(s); ok && !reflect.DeepEqual(fast, want) {
		t.Fatalf("scanMeta(%q) = %#v, json.Unmarshal gives %#v", s, fast, want)
	}
}

var metaKeys = []string{"", "a", "k1", "with space", "<x>", "a&b", `q"`, `b\`, "é", "\x01", "\x7f", "\xff", "\u2028", "~"}

func TestMetaOfMatchesMarshal(t *testing.T) {
	headers := []map[string]string{nil, {}, {"a": "b"}, {"z": "1", "a": "<"}}
	for _, k := range metaKeys {
		for _, h := range headers {
			for p := range 256 {
				m := engine.Message{Key: k, Headers: h, Priority: uint8(p)}
				if got, want := metaOf(&m), wantMeta(t, &m); got != want {
					t.Fatalf("metaOf(key %q, headers %v, priority %d) = %q, json.Marshal gives %q", k, h, p, got, want)
				}
			}
		}
	}
}

func TestDecodeMetaMatchesUnmarshal(t *testing.T) {
	for _, s := range []string{
		`{}`, `{"p":1}`, `{"p":0}`, `{"p":255}`, `{"p":256}`, `{"p":01}`, `{"p":-1}`, `{"p":1.0}`, `{"p":1e0}`, `{"p":1000}`,
		`{"p":"1"}`, `{"p":null}`, `{"p":}`, `{"p":1,}`, `{"p":1}x`, `{"p":1} `, ` {"p":1}`, `{ "p":1}`, `{"p" :1}`,
		`{"k":"a"}`, `{"k":"a","p":3}`, `{"k":"","p":3}`, `{"k":"a\"b"}`, `{"k":"a\\b"}`, `{"k":"\u00e9"}`, `{"k":"é"}`,
		"{\"k\":\"\xff\"}", "{\"k\":\"a\tb\"}", `{"k":null}`, `{"k":1}`, `{"K":"a"}`, `{"P":2}`, `{"k":"a","k":"b"}`,
		`{"p":1,"k":"a"}`, `{"h":{},"k":"a"}`, `{"x":1}`, `{"k":"a","x":1}`,
		`{"h":{}}`, `{"h":{"a":"b"}}`, `{"h":{"a":"b","c":"d"}}`, `{"h":{"a":"b","a":"c"}}`, `{"h":{"a":1}}`,
		`{"h":{"a":"b",}}`, `{"h":{"a":"b"},"p":1}`, `{"k":"x","h":{"a":"b"},"p":9}`, `{"h":null}`, `{"h":{"a":null}}`,
		`{"h":{"a":"b"}`, `{"h":{"a"}}`, `{"h":{"a":}}`, `{"h":[]}`, `{"h":{"a":"b"}"p":1}`,
		``, `{`, `}`, `{"`, `{"k`, `{"k"`, `{"k":`, `{"k":"`, `{"k":"a`, `{"k":"a"`, `null`, `[]`, `"x"`,
	} {
		checkDecode(t, s)
	}
}

// TestDecodeMetaFastPath shows that what metaOf writes for the common
// records is read without encoding/json.
func TestDecodeMetaFastPath(t *testing.T) {
	for _, m := range []engine.Message{
		{Priority: 1},
		{Key: "user-42"},
		{Key: "user-42", Priority: 200},
		{Key: "é", Headers: map[string]string{"trace": "abc", "b": ""}, Priority: 1},
	} {
		s := metaOf(&m)
		got, ok := scanMeta(s)
		if !ok {
			t.Fatalf("scanMeta(%q) took the slow path", s)
		}
		want := recMeta{K: m.Key, H: m.Headers, P: m.Priority}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("scanMeta(%q) = %#v, want %#v", s, got, want)
		}
	}
}

func FuzzDecodeMeta(f *testing.F) {
	for _, s := range []string{`{}`, `{"p":1}`, `{"k":"a","h":{"x":"y"},"p":7}`, `{"h":{"a":"b","a":"c"}}`, `{"p":256}`, `{"k":"\u00e9"}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkDecode(t, s) })
}

func FuzzMetaOf(f *testing.F) {
	f.Add("", "", "", uint8(1), false)
	f.Add("k", "a", "b", uint8(0), true)
	f.Add("<&>", "\u2028", "\xff", uint8(255), true)
	f.Fuzz(func(t *testing.T, key, hk, hv string, p uint8, withHeader bool) {
		m := engine.Message{Key: key, Priority: p}
		if withHeader {
			m.Headers = map[string]string{hk: hv}
		}
		s := metaOf(&m)
		if want := wantMeta(t, &m); s != want {
			t.Fatalf("metaOf(%+v) = %q, json.Marshal gives %q", m, s, want)
		}
		if s != "" {
			checkDecode(t, s)
		}
	})
}

func BenchmarkDecodeMeta(b *testing.B) {
	for _, c := range []struct{ name, s string }{
		{"priority", `{"p":1}`},
		{"key and headers", `{"k":"user-42","h":{"trace":"0af7651916cd43dd"},"p":1}`},
		{"escaped", `{"k":"a\"b","p":1}`},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := decodeMeta(c.s); !ok {
					b.Fatal(c.s)
				}
			}
		})
		b.Run(c.name+" encoding/json", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				var m recMeta
				if err := json.Unmarshal([]byte(c.s), &m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkMetaOf(b *testing.B) {
	for _, c := range []struct {
		name string
		m    engine.Message
	}{
		{"priority", engine.Message{Priority: 1}},
		{"key", engine.Message{Key: "user-42", Priority: 1}},
		{"headers", engine.Message{Key: "user-42", Headers: map[string]string{"trace": strings.Repeat("a", 16)}, Priority: 1}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if metaOf(&c.m) == "" {
					b.Fatal("no metadata")
				}
			}
		})
	}
}
