package wire_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
)

// TestBinaryPayloads: a payload published as bytes is stored with the
// marker only when it is not JSON, and reads back as base64 with
// "encoding" (and without the marker among the headers), or as JSON.
func TestBinaryPayloads(t *testing.T) {
	for _, tc := range []struct {
		name    string
		payload string
		headers map[string]string
		want    string // the record body from "data" on
	}{
		{"json object", `{"a":1}`, nil, `,"data":{"a":1}`},
		{"json string", `"hi"`, nil, `,"data":"hi"`},
		{"bytes", "\x00\x01\x02\xff", nil, `,"data":"AAEC/w==","encoding":"base64"`},
		{"bytes with a header", "\x00", map[string]string{"k": "v"}, `,"headers":{"k":"v"},"data":"AA==","encoding":"base64"`},
		{"text that is not json", "hello", nil, `,"data":"aGVsbG8=","encoding":"base64"`},
		{"json with a line break", "{\n}", nil, `,"data":"ewp9","encoding":"base64"`},
		{"empty", "", nil, `,"data":"","encoding":"base64"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			enc := wire.EncodingBase64
			data, _ := json.Marshal(base64.StdEncoding.EncodeToString([]byte(tc.payload)))
			payload, pe := wire.DecodePayload(data, &enc)
			if pe != nil || !bytes.Equal(payload, []byte(tc.payload)) {
				t.Fatalf("DecodePayload = %q, %v", payload, pe)
			}
			rec := &engine.Record{Topic: "t", Headers: wire.MarkBinary(tc.headers, payload), Data: payload}
			body := string(wire.AppendRecordBodyUntilTime(nil, rec))
			if want := `,"topic":"t","partition":0,"offset":0` + tc.want; body != want {
				t.Errorf("body %s\nwant %s", body, want)
			}
			if !json.Valid([]byte("{" + body[1:] + "}")) {
				t.Errorf("body %s is not JSON", body)
			}
			d, e := wire.DataField(rec.Data, wire.IsBinary(rec.Headers))
			if !strings.Contains(tc.want, `"data":`+string(d)) || (e != "") != strings.Contains(tc.want, "encoding") {
				t.Errorf("DataField = %s %q", d, e)
			}
		})
	}
}

// BenchmarkRecordBody is the per-record cost of a message frame's shared
// body, for a small and a 1 KiB JSON payload (the common case, which now
// includes the check that the payload is JSON) and for bytes.
func BenchmarkRecordBody(b *testing.B) {
	for _, bc := range []struct {
		name string
		data []byte
	}{
		{"json-40B", []byte(`{"sku":"A-1","qty":2,"price":1999,"x":1}`)},
		{"json-1KiB", []byte(`{"items":[` + strings.Repeat(`{"sku":"A-1","qty":2},`, 46) + `{"sku":"A-1","qty":2}]}`)},
		{"bytes-1KiB", bytes.Repeat([]byte{0, 1, 2, 0xff}, 256)},
	} {
		rec := &engine.Record{Topic: "orders.created.eu", Partition: 3, Offset: 123456, Key: "customer-42",
			Data: bc.data, Time: time.Date(2026, 11, 29, 8, 0, 0, 123e6, time.UTC)}
		rec.Headers = wire.MarkBinary(nil, bc.data)
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			dst := make([]byte, 0, 4096)
			for b.Loop() {
				dst, _ = wire.RecordBody(dst[:0], rec)
			}
		})
	}
}
