package router_test

import (
	"testing"
)

// TestRedriveRequestValidation: a redrive body that is not what the
// contract says is refused with a 400 naming the problem, before any dead
// letter is touched.
func TestRedriveRequestValidation(t *testing.T) {
	g := newGateway(t)
	tests := []struct {
		name string
		body any
		want string
	}{
		{"neither group nor ids", map[string]any{}, `give "group" (all of its dead letters), "ids" or both`},
		{"append_to_topics alone", map[string]any{"append_to_topics": true}, `give "group" (all of its dead letters), "ids" or both`},
		{"append_to_topics not a boolean", map[string]any{"group": "g", "append_to_topics": "yes"}, `field "append_to_topics" has the wrong type (want bool)`},
		{"ids not a list", map[string]any{"ids": "a"}, `field "ids" has the wrong type (want []string)`},
		{"misspelt field", map[string]any{"group": "g", "appendToTopics": true}, `unknown field "appendToTopics": a redrive takes "group", "ids" and "append_to_topics"`},
		{"not an object", []any{"g"}, "body must be a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body, _ := g.httpDo(t, "POST", "/v1/deadletters/redrive", tt.body)
			if code != 400 || body["code"] != "bad_request" || body["message"] != tt.want {
				t.Fatalf("got %d %v, want 400 bad_request %q", code, body, tt.want)
			}
		})
	}
	code, body, _ := g.httpDo(t, "POST", "/v1/deadletters/redrive", map[string]any{"group": "nobody", "append_to_topics": false})
	if code != 200 || num(body, "redriven") != 0 {
		t.Fatalf("redrive of a group without letters: %d %v, want 200 redriven 0", code, body)
	}
}
