package router

import (
	"strings"
	"testing"

	"github.com/switchyard/switchyard/router/internal/auth"
	"github.com/switchyard/switchyard/trie"
)

// TestGroupGrantNames checks that a group grant that is not a pattern is
// accepted exactly when the router accepts it as a group name (both use
// auth.ValidateGroupName).
func TestGroupGrantNames(t *testing.T) {
	names := []string{"", "billing", "a b", "a/b", "é", "a\xff", "team.*", "x:y-z_0.1", strings.Repeat("g", 255), strings.Repeat("g", 256)}
	for c := range 256 {
		// "a..": an empty segment, so never a pattern; only the group rule decides.
		b := string([]byte{byte(c)})
		names = append(names, b, "a"+b+"b", "a.."+b, b+"..z")
	}
	n := 0
	for _, g := range names {
		if trie.ValidatePattern(g) == nil {
			continue // a pattern grant: valid whatever the group rule says
		}
		n++
		_, err := auth.ValidGrants(Grants{Groups: []string{g}})
		if want := validGroup(g) == nil; (err == nil) != want {
			t.Errorf("group grant %q: auth says %v, the router's group rule ok=%v", g, err, want)
		}
	}
	if n < 512 {
		t.Fatalf("only %d names were not patterns", n)
	}
}
