package router_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/internal/wire/golden"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/router/apidocs/apicheck"
)

func readDoc(t *testing.T, name string) map[string]any {
	t.Helper()
	data, err := os.ReadFile("apidocs/" + name)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return m
}

// pointer follows a JSON pointer ("#/a/b") in doc.
func pointer(doc any, ref string) (any, bool) {
	cur := doc
	for _, tok := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		if cur, ok = m[tok]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// TestAPIDocsServed checks that the gateway serves the documents kept in
// router/apidocs.
func TestAPIDocsServed(t *testing.T) {
	g := newGateway(t)
	for _, name := range []string{"openapi.json", "asyncapi.json"} {
		t.Run(name, func(t *testing.T) {
			want, err := os.ReadFile("apidocs/" + name)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := g.srv.Client().Get(g.srv.URL + "/v1/" + name)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			got, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") || !bytes.Equal(got, want) {
				t.Fatalf("GET /v1/%s: %d %s, %d bytes; want the %d bytes of apidocs/%s", name, resp.StatusCode, resp.Header.Get("Content-Type"), len(got), len(want), name)
			}
		})
	}
}

// TestOpenAPIDocumentValid checks that openapi.json is a valid OpenAPI 3.1
// document for libopenapi-validator.
func TestOpenAPIDocumentValid(t *testing.T) {
	spec, err := os.ReadFile("apidocs/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); v != "3.1.0" {
		t.Fatalf("openapi version %q, want 3.1.0", v)
	}
	if _, err := doc.BuildV3Model(); err != nil {
		t.Fatalf("building the 3.1 model: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("%s: %s", e.Message, e.Reason)
			for _, s := range e.SchemaValidationErrors {
				t.Errorf("\t%s at %s", s.Reason, s.FieldPath)
			}
		}
	}
	// Every $ref resolves.
	m := readDoc(t, "openapi.json")
	for _, ref := range refs(m) {
		if _, ok := pointer(m, ref); !ok {
			t.Errorf("openapi.json: $ref %q resolves to nothing", ref)
		}
	}
}

// refs returns every "$ref" value in v.
func refs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" {
				out = append(out, s)
			}
			out = append(out, refs(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, refs(e)...)
		}
	}
	return out
}

// TestOpenAPIDescribesEveryRoute lists the routes the router registers
// (with and without the dashboard's files) and checks that openapi.json
// describes exactly those operations: a new route without a description,
// or a description of a route that is gone, fails here.
func TestOpenAPIDescribesEveryRoute(t *testing.T) {
	paths, _ := readDoc(t, "openapi.json")["paths"].(map[string]any)
	documented := map[string]bool{}
	for p, item := range paths {
		for method := range item.(map[string]any) {
			if method != "parameters" {
				documented[strings.ToUpper(method)+" "+p] = true
			}
		}
	}
	registered := map[string]bool{}
	for _, static := range []bool{false, true} {
		g := newGateway(t, func(c *gwConfig) {
			if static {
				c.router.Static = fstest.MapFS{"index.html": {Data: []byte("<p>dashboard</p>")}}
			}
		})
		for _, r := range router.Routes(g.rt) {
			p := r[1]
			switch p {
			case "/*":
				p = "/{file}"
			case "/v1/*":
				p = "/v1/{rest}"
			}
			segs := strings.Split(p, "/")
			for i, s := range segs {
				if strings.HasPrefix(s, ":") {
					segs[i] = "{" + s[1:] + "}"
				}
			}
			registered[r[0]+" "+strings.Join(segs, "/")] = true
		}
	}
	for r := range registered {
		if !documented[r] {
			t.Errorf("route %s is not described in apidocs/openapi.json", r)
		}
	}
	for d := range documented {
		if !registered[d] {
			t.Errorf("apidocs/openapi.json describes %s, which the router does not register", d)
		}
	}
	if len(registered) < 25 {
		t.Fatalf("only %d routes listed: %v", len(registered), registered)
	}
}

// TestAPIDocsErrorCodes checks that both documents list exactly the
// error codes of internal/wire.
func TestAPIDocsErrorCodes(t *testing.T) {
	for _, tc := range []struct{ doc, ptr string }{
		{"openapi.json", "#/components/schemas/Error/properties/code/enum"},
		{"asyncapi.json", "#/components/schemas/ErrorFrame/properties/code/enum"},
	} {
		v, ok := pointer(readDoc(t, tc.doc), tc.ptr)
		if !ok {
			t.Fatalf("%s: no %s", tc.doc, tc.ptr)
		}
		var got []string
		for _, c := range v.([]any) {
			got = append(got, c.(string))
		}
		if !slices.Equal(got, wire.Codes) {
			t.Errorf("%s %s = %v, want wire.Codes %v", tc.doc, tc.ptr, got, wire.Codes)
		}
	}
}

// TestAsyncAPIDocument checks the AsyncAPI document's structure: version
// 3, every $ref resolves, and its frame unions name exactly the ops of
// internal/wire (client ops; server ops, plus SSE's close).
func TestAsyncAPIDocument(t *testing.T) {
	m := readDoc(t, "asyncapi.json")
	if m["asyncapi"] != "3.0.0" {
		t.Fatalf("asyncapi = %v, want 3.0.0", m["asyncapi"])
	}
	for _, ref := range refs(m) {
		if _, ok := pointer(m, ref); !ok {
			t.Errorf("asyncapi.json: $ref %q resolves to nothing", ref)
		}
	}
	ops := func(name string) []string {
		v, ok := pointer(m, "#/components/schemas/"+name+"/properties/op/enum")
		if !ok {
			t.Fatalf("no op enum in %s", name)
		}
		var out []string
		for _, o := range v.([]any) {
			out = append(out, o.(string))
		}
		slices.Sort(out)
		return out
	}
	client := []string{wire.OpSubscribe, wire.OpUnsubscribe, wire.OpPublish, wire.OpAck, wire.OpNack, wire.OpRefresh, wire.OpPresence, wire.OpPing}
	server := []string{wire.OpWelcome, wire.OpSubscribed, wire.OpUnsubscribed, wire.OpPublished, wire.OpAcked, wire.OpNacked,
		wire.OpRefreshed, wire.OpRefreshRequired, wire.OpPong, wire.OpMessage, wire.OpGap, wire.OpError, wire.OpJoin, wire.OpLeave,
		wire.OpTopicDeleted, wire.OpPresence, "close"}
	slices.Sort(client)
	slices.Sort(server)
	if got := ops("ClientFrame"); !slices.Equal(got, client) {
		t.Errorf("ClientFrame ops %v, want %v", got, client)
	}
	if got := ops("ServerFrame"); !slices.Equal(got, server) {
		t.Errorf("ServerFrame ops %v, want %v", got, server)
	}
}

// TestGoldenFramesMatchSchemas validates every frame of every golden
// transcript (internal/wire/testdata) against asyncapi.json: every server
// frame against ServerFrame; every client frame against ClientFrame,
// except the malformed frames a transcript sends on purpose, which the
// schema must refuse too and the gateway must answer with an error frame.
func TestGoldenFramesMatchSchemas(t *testing.T) {
	loadAPIDocs(t)
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	vars := strings.NewReplacer("$EPOCH", "5d1f0c2a9e7b4f31", "$SESSION_", "9f2c4d1e8a7b3c6")
	var sent, refused, received int
	for _, tr := range all {
		t.Run(tr.Name, func(t *testing.T) {
			for i, st := range tr.Steps {
				frame := []byte(vars.Replace(st.Frame))
				if !st.Send {
					continue
				}
				sent++
				err := apicheck.ClientFrame(frame)
				if err == nil {
					continue
				}
				refused++
				reply := ""
				for _, next := range tr.Steps[i+1:] {
					if next.Session == st.Session && !next.Send {
						reply = next.Frame
						break
					}
				}
				if !strings.HasPrefix(reply, `{"op":"error"`) {
					t.Errorf("%s:%d: client frame %s does not match ClientFrame (%v), yet the gateway answers %s", tr.Path, st.Line, frame, err, reply)
				}
			}
			for _, st := range tr.Received() {
				received++
				if err := checkServerFrame([]byte(vars.Replace(st.Frame))); err != nil {
					t.Errorf("%s:%d: %v", tr.Path, st.Line, err)
				}
			}
		})
	}
	t.Logf("%d transcripts: %d client frames (%d malformed on purpose), %d server frames validated", len(all), sent, refused, received)
	if sent == 0 || received == 0 || refused == 0 {
		t.Fatalf("validated %d client and %d server frames, %d refused: the transcripts were not read", sent, received, refused)
	}
}

// TestFrameSchemasRefuse mutates valid frames and checks that the schemas
// refuse each: the validation can fail.
func TestFrameSchemasRefuse(t *testing.T) {
	loadAPIDocs(t)
	for _, tc := range []struct {
		name, valid, bad string
		client           bool
	}{
		{"message without offset",
			`{"op":"message","pattern":"a.*","topic":"a.b","partition":0,"offset":3,"data":1,"time":"2026-11-29T08:00:00.123Z"}`,
			`{"op":"message","pattern":"a.*","topic":"a.b","partition":0,"data":1,"time":"2026-11-29T08:00:00.123Z"}`, false},
		{"error with an unknown code",
			`{"op":"error","id":1,"code":"bad_request","message":"x"}`,
			`{"op":"error","id":1,"code":"no_such_code","message":"x"}`, false},
		{"subscribed with an unknown field",
			`{"op":"subscribed","id":1,"pattern":"a"}`,
			`{"op":"subscribed","id":1,"pattern":"a","extra":true}`, false},
		{"gap with an unknown reason",
			`{"op":"gap","pattern":"a","topic":"a","partition":0,"from":1,"to":2,"reason":"retention"}`,
			`{"op":"gap","pattern":"a","topic":"a","partition":0,"from":1,"to":2,"reason":"bored"}`, false},
		{"unknown server op",
			`{"op":"pong","id":1}`,
			`{"op":"pang","id":1}`, false},
		{"welcome without limits",
			`{"op":"welcome","session":"s","epoch":"e","limits":{"max_subscriptions":1,"queue_messages":2}}`,
			`{"op":"welcome","session":"s","epoch":"e"}`, false},
		{"publish with a numeric topic",
			`{"op":"publish","id":1,"topic":"t","data":1}`,
			`{"op":"publish","id":1,"topic":7,"data":1}`, true},
		{"ack with offset and offsets",
			`{"op":"ack","group":"g","topic":"t","partition":0,"offsets":[1,2]}`,
			`{"op":"ack","group":"g","topic":"t","partition":0,"offset":1,"offsets":[1,2]}`, true},
		{"subscribe with an unknown from",
			`{"op":"subscribe","pattern":"t","from":{"last":2}}`,
			`{"op":"subscribe","pattern":"t","from":"yesterday"}`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check := apicheck.ServerFrameUncounted
			if tc.client {
				check = apicheck.ClientFrame
			}
			if err := check([]byte(tc.valid)); err != nil {
				t.Fatalf("valid frame %s refused: %v", tc.valid, err)
			}
			if err := check([]byte(tc.bad)); err == nil {
				t.Fatalf("mutated frame %s accepted", tc.bad)
			}
		})
	}
}

// TestWebSocketCrossOriginRefusalIsJSON: docs/protocol.md says every
// HTTP error is {"code","message"} with a matching status, and
// openapi.json describes GET /v1/ws's refusals so. A WebSocket upgrade
// from a foreign Origin was refused by the WebSocket library in plain text
// ("request Origin … is not authorized for Host …"); the gateway now
// checks the Origin itself and answers 403 forbidden as its other
// refusals do.
func TestWebSocketCrossOriginRefusalIsJSON(t *testing.T) {
	g := newGateway(t)
	req, err := http.NewRequest(http.MethodGet, g.srv.URL+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Version": "13",
		"Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Origin": "http://evil.example"} {
		req.Header.Set(k, v)
	}
	resp, err := g.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var e struct{ Code, Message string }
	if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") ||
		json.Unmarshal(body, &e) != nil || e.Code != wire.CodeForbidden {
		t.Fatalf("cross-origin upgrade: %d %s %q; want 403 application/json {\"code\":\"forbidden\",…}", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

// TestOpenAPIGeneratesClients holds the rules code generators need and
// the document once broke (oapi-codegen stopped at a parameter and a
// schema both named Group, and typed a `const` without a type as an
// empty interface): a component's name is used once across the
// components' sections, ignoring case, and every schema with const or
// enum says its type.
func TestOpenAPIGeneratesClients(t *testing.T) {
	doc := readDoc(t, "openapi.json")
	comps, _ := doc["components"].(map[string]any)
	seen := map[string]string{}
	for section, v := range comps {
		if section == "securitySchemes" {
			continue // not a type in a generated client
		}
		m, _ := v.(map[string]any)
		for name := range m {
			k := strings.ToLower(name)
			if other, ok := seen[k]; ok {
				t.Errorf("components/%s/%s and components/%s share a name: generators make one type of each", section, name, other)
			}
			seen[k] = section + "/" + name
		}
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			_, hasConst := x["const"]
			_, hasEnum := x["enum"]
			if _, typed := x["type"]; (hasConst || hasEnum) && !typed {
				t.Errorf("%s has const or enum without a type", path)
			}
			for k, c := range x {
				walk(path+"/"+k, c)
			}
		case []any:
			for i, c := range x {
				walk(fmt.Sprintf("%s/%d", path, i), c)
			}
		}
	}
	walk("#", doc)
	if len(seen) < 10 {
		t.Fatalf("found %d components: the document was not read", len(seen))
	}
}
