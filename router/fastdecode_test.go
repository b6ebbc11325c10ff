package router

import (
	"encoding/json"
	"reflect"
	"testing"
)

// fastSeeds are frames the fast path takes, and some it must leave to
// encoding/json.
var fastSeeds = []string{
	`{"op":"publish","id":12,"topic":"g.1","data":{"n":1,"s":"x\"\u00e9","a":[1,-2.5e3,true,false,null,{}]}}`,
	`{"op":"publish","topic":"t","data":"s","key":"k","msg_id":"m","priority":3}`,
	`{"op":"ack","group":"g","topic":"t","partition":7,"offsets":[1,2,3]}`,
	`{"op":"ack","group":"g","topic":"t","partition":7,"offsets":[]}`,
	`{"op":"nack","group":"g","topic":"t","partition":0,"offset":-0}`,
	` { "op" : "ack" , "id" : "x" } `, `{}`, `{"op":"a","op":"b"}`, `{"OP":"a"}`, `{"op":"\u0061"}`,
	`{"op":null}`, `{"data":null}`, `{"partition":1.0}`, `{"partition":1e2}`, `{"partition":01}`,
	`{"offset":9223372036854775808}`, `{"topic":"é"}`, `{"data":[1,]}`, `{"data":"\x"}`, `{"op":"a"}x`,
	`{"data":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
}

// FuzzDecodeFast: whatever the fast path accepts, encoding/json accepts
// too and decodes to the same request.
func FuzzDecodeFast(f *testing.F) {
	for _, s := range append(fastSeeds, requestSeeds...) {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var fast request
		if !decodeFast(data, &fast) {
			return
		}
		var slow request
		if err := json.Unmarshal(data, &slow); err != nil {
			t.Fatalf("fast path accepted %q, encoding/json: %v", data, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast path %+v, encoding/json %+v", data, fast, slow)
		}
	})
}

// TestDecodeFastTakesCommonFrames: the frames of a publisher and a group
// member go through the fast path.
func TestDecodeFastTakesCommonFrames(t *testing.T) {
	for _, s := range fastSeeds[:5] {
		var req request
		if !decodeFast([]byte(s), &req) {
			t.Errorf("fast path refused %s", s)
		}
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	frame := []byte(`{"op":"publish","id":12,"topic":"lt.g.0","data":{"lt":"1764590000000000000 000000042","pad":"xxxxxxxxxxxxxxxx"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, pe := decodeRequest(frame); pe != nil {
			b.Fatal(pe)
		}
	}
}
