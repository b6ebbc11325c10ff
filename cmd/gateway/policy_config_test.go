package main

// Tests of the topics entries' router settings
// (topic_policies.go).

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// checkConfigRefused runs check-config on yaml and fails the test unless
// it is refused with an error naming a line.
func checkConfigRefused(t *testing.T, yaml string) {
	t.Helper()
	var out bytes.Buffer
	err := run(context.Background(), []string{"check-config", writeConfig(t, yaml)}, noEnv, &out, nil)
	if err == nil {
		t.Fatalf("%q accepted as valid; out %q", yaml, out.String())
	}
	if !strings.Contains(err.Error(), "line ") {
		t.Errorf("error %q names no line", err)
	}
}

// TestPolicyConfigMaxLastFraction: max_last takes "an integer from
// 1 to 1000000" (the entry's error says so); a fraction is not one and
// must be refused with its line, not truncated to a bound the operator
// did not write (2.9 becomes 2).
func TestPolicyConfigMaxLastFraction(t *testing.T) {
	checkConfigRefused(t, "topics:\n  - pattern: a.#\n    max_last: 2.9\n")
}

// TestPolicyConfigKeyTwice: a key given twice in one topics entry
// (or in its anonymous mapping) must be refused with its line; today the
// later value wins silently, so "presence: false" followed by a stray
// "presence: true" leaves presence on, and an anonymous publish grant
// written false then true opens the topics to anonymous publishers.
func TestPolicyConfigKeyTwice(t *testing.T) {
	for name, yaml := range map[string]string{
		"presence":  "topics:\n  - pattern: a.#\n    presence: false\n    presence: true\n",
		"anonymous": "topics:\n  - pattern: a.#\n    anonymous: {publish: false, publish: true}\n",
	} {
		t.Run(name, func(t *testing.T) { checkConfigRefused(t, yaml) })
	}
}
