package router

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/switchyard/switchyard/trie"
)

// Fuzz targets for the parsers that take untrusted input: client frames
// and "from" specs (token claims are fuzzed in router/internal/auth). Seeds
// come from the protocol tests' tables and router/testdata/fuzz/<Name>/.

var requestSeeds = []string{
	`{"op":"publish","id":1,"topic":"orders.created.eu","data":{"sku":"A-1"},"key":"c-42","headers":{"region":"eu"},"msg_id":"m1","priority":2}`,
	`{"op":"subscribe","id":"s","pattern":"orders.*.eu","from":{"epoch":"e","positions":[{"topic":"a","partition":0,"offset":3}]}}`,
	`{"op":"subscribe","pattern":"orders.#","group":"billing","from":"earliest","filter":{"headers":{"region":"eu"}}}`,
	`{"op":"ack","group":"g","topic":"a","partition":0,"offset":1,"id":7}`,
	`{"op":"ack","group":"g","topic":"a","partition":0,"offsets":[1,2],"id":8}`,
	`{"op":"publish","data":"x\n"}`,
	`not json`, `[]`, `null`, `{"op":5}`, `{"id":{"a":1},"op":"x"}`, `{"id":[1,` + "\n" + `2],"op":"x"}`,
	`{"id":true}`, `{"op":"publish","topic":"$sys.x","data":1}`, `{"op":"publish","topic":"a","data":1,"priority":9}`,
	`{"op":"publish","topic":"a","data":[1,` + "\n" + `2],"headers":{"k":"\ud800"}}`,
}

func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, pe := decodeRequest(data)
		if req == nil {
			t.Fatal("decodeRequest returned a nil request")
		}
		if pe != nil {
			if pe.Code != codeBadRequest || statusOf(pe.Code) != http.StatusBadRequest {
				t.Fatalf("decode error code %q", pe.Code)
			}
			checkFrame(t, encodeError(req.ID, pe.Code, pe.Msg))
			return
		}
		if req.Op == "" {
			t.Fatal("accepted a request without op")
		}
		if len(req.ID) > 0 {
			checkFrame(t, encodeError(req.ID, codeInternal, "x"))
		}
		bounds := Bounds{}.withDefaults()
		msg, pe := parsePublish(req, 1<<10, &bounds)
		if pe != nil {
			switch pe.Code {
			case codeBadRequest, codeInvalidTopic, codeForbidden, codeTooLarge:
			default:
				t.Fatalf("publish error code %q", pe.Code)
			}
		} else {
			if trie.ValidateTopic(msg.Topic) != nil || trie.IsSystem(msg.Topic) {
				t.Fatalf("accepted topic %q", msg.Topic)
			}
			if !json.Valid(msg.Data) || bytes.ContainsAny(msg.Data, "\n\r") {
				t.Fatalf("stored data %q is not one line of JSON", msg.Data)
			}
		}
		if _, pe := parseFrom(req.From); pe != nil && pe.Code != codeBadRequest && pe.Code != codeInvalidTopic {
			t.Fatalf("from error code %q", pe.Code)
		}
	})
}

// checkFrame asserts that a server frame is one line of valid JSON: clients
// split batches on newlines.
func checkFrame(t *testing.T, frame []byte) {
	t.Helper()
	if !json.Valid(frame) || bytes.ContainsAny(frame, "\n\r") {
		t.Fatalf("frame %q is not one line of JSON", frame)
	}
}

func FuzzParseFrom(f *testing.F) {
	for _, s := range []string{
		``, `null`, `"latest"`, `"earliest"`, `"oldest"`, `{"time":"2026-11-29T08:00:00.123Z"}`, `{"time":"yesterday"}`,
		`{"epoch":"e1","positions":[{"topic":"a.b","partition":0,"offset":-1},{"topic":"c","partition":2,"offset":9}]}`,
		`{"epoch":"e1","positions":[{"topic":"a..b","partition":0,"offset":1}]}`,
		`{"epoch":"e1","positions":[{"topic":"a","partition":-1,"offset":1}]}`,
		`{"epoch":5}`, `{}`, `[]`, `{"time":null,"epoch":"x","positions":null}`,
		`"last"`, `{"last":3}`, `{"last":0}`, `{"last":-2}`, `{"last":1e12}`, `{"last":"3"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		spec, pe := parseFrom(raw)
		if pe != nil {
			if pe.Code != codeBadRequest && pe.Code != codeInvalidTopic {
				t.Fatalf("code %q", pe.Code)
			}
			return
		}
		for _, p := range spec.pos {
			if trie.ValidateTopic(p.Topic) != nil || p.Partition < 0 || p.Offset < -1 {
				t.Fatalf("accepted position %+v", p)
			}
		}
		if !spec.positions && len(spec.pos) > 0 {
			t.Fatal("positions without the positions flag")
		}
		if spec.last < 0 {
			t.Fatalf("accepted last %d", spec.last)
		}
	})
}
