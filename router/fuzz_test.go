package router

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/switchyard/switchyard/trie"
)

// Fuzz targets for the parsers that take untrusted input: client frames,
// "from" specs and token claims. Seeds come from the protocol tests' tables
// and router/testdata/fuzz/<Name>/.

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

// fuzzSecret signs the tokens FuzzClaims builds.
var fuzzSecret = []byte("fuzzing-secret-0123456789abcdef-0123")

// fuzzNow is the fixed clock of FuzzClaims; seeds use exp 2000000000.
var fuzzNow = time.Unix(1900000000, 0)

func FuzzClaims(f *testing.F) {
	seeds := []struct{ payload, topic, pattern, group string }{
		{`{"exp":2000000000,"sub":"u","publish":["orders.*.eu"],"subscribe":["orders.#","$sys.stats"],"groups":["billing","team.*"]}`, "orders.x.eu", "orders.*", "team.a"},
		{`{"exp":2000000000,"publish":["#"]}`, "$sys.stats", "#", "g"},
		{`{"exp":1000000000,"subscribe":["#"]}`, "a", "a", "a"},
		{`{"exp":2000000000,"nbf":1950000000}`, "a", "a", "a"},
		{`{"exp":2000000000,"subscribe":"#"}`, "a", "a", "a"},
		{`{"exp":2000000000,"subscribe":["a*"]}`, "a", "a", "a"},
		{`{"exp":2000000000,"groups":["a..b"]}`, "a", "a", "a..b"},
		{`{"exp":"soon"}`, "a", "a", "a"},
		{`{}`, "", "", ""},
		{`eyJhbGciOiJub25lIn0.e30.`, "a", "#", "g"},
	}
	for _, s := range seeds {
		f.Add([]byte(s.payload), s.topic, s.pattern, s.group)
	}
	a, err := newAuthenticator(AuthOptions{HMACSecrets: [][]byte{fuzzSecret}, AdminKey: "fuzz-admin-key-0123"})
	if err != nil {
		f.Fatal(err)
	}
	a.now = func() time.Time { return fuzzNow }
	header := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	f.Fuzz(func(t *testing.T, payload []byte, topic, pattern, group string) {
		// The payload as a whole token: garbage must be refused cleanly.
		if p, ae := a.authenticate(string(payload)); ae == nil && !p.admin {
			t.Fatalf("accepted an unsigned credential %q", payload)
		}
		signing := header + "." + base64.RawURLEncoding.EncodeToString(payload)
		sig, err := jwt.SigningMethodHS256.Sign(signing, fuzzSecret)
		if err != nil {
			t.Fatal(err)
		}
		p, ae := a.authenticate(signing + "." + base64.RawURLEncoding.EncodeToString(sig))
		if ae != nil {
			if ae.msg == "" || ae.reason == "" {
				t.Fatalf("auth error without a reason: %+v", ae)
			}
			return
		}
		if p.admin || !p.expires.After(fuzzNow) {
			t.Fatalf("principal %+v from claims %q", p, payload)
		}
		if _, err := validGrants(p.grants); err != nil {
			t.Fatalf("accepted invalid grants %+v: %v", p.grants, err)
		}
		if trie.ValidateTopic(topic) == nil && p.canPublish(topic) {
			ok := false
			for _, g := range p.grants.Publish {
				ok = ok || trie.Matches(g, topic)
			}
			if !ok {
				t.Fatalf("publish to %q allowed by %v", topic, p.grants.Publish)
			}
		}
		if trie.ValidatePattern(pattern) == nil && p.canSubscribe(pattern) {
			// Every topic the subscription could see must be allowed.
			if trie.ValidateTopic(topic) == nil && trie.Matches(pattern, topic) {
				ok := false
				for _, g := range p.grants.Subscribe {
					ok = ok || trie.Matches(g, topic)
				}
				if !ok {
					t.Fatalf("subscribe %q allowed by %v but %q escapes", pattern, p.grants.Subscribe, topic)
				}
			}
		}
		_ = p.canJoin(group)
	})
}
