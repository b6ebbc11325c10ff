package client_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/centrifugal/fdelta"
)

var updateFossil = flag.Bool("update-fossil", false, "rewrite web/testdata/fossil_vectors.json")

// fossilVector is one case of web/testdata/fossil_vectors.json, which the
// JS client's fossil.js is tested against too (web/fossil.test.mjs): delta
// applied to origin gives target, or fails when bad.
type fossilVector struct {
	Name   string `json:"name"`
	Origin []byte `json:"origin"`
	Target []byte `json:"target,omitempty"`
	Delta  []byte `json:"delta"`
	Bad    bool   `json:"bad,omitempty"`
}

const fossilVectorsPath = "../web/testdata/fossil_vectors.json"

func makeFossilVectors() []fossilVector {
	var vs []fossilVector
	add := func(name string, origin, target []byte) {
		vs = append(vs, fossilVector{Name: name, Origin: origin, Target: target, Delta: fdelta.Create(origin, target)})
	}
	add("dashboard state, a few fields changed", dashState(1), dashState(2))
	add("dashboard state, far versions", dashState(3), dashState(1234))
	add("empty to text", nil, []byte("hello, delta"))
	add("text to empty", []byte("hello, delta"), nil)
	add("identical", dashState(7), dashState(7))
	add("unrelated", []byte(strings.Repeat("abcdefgh", 40)), []byte(strings.Repeat("12345678", 33)))
	add("multi-byte text split", []byte(`{"city":"Zürich","note":"`+strings.Repeat("é", 40)+`"}`), []byte(`{"city":"Zürich","note":"`+strings.Repeat("è", 40)+`"}`))
	high := make([]byte, 300)
	for i := range high {
		high[i] = byte(i*7 + 128)
	}
	high2 := append(append([]byte{}, high[:150]...), append([]byte{0, 1, 2, 255}, high[150:]...)...)
	add("high bytes with an insert", high, high2)
	// Bad: a delta against another origin (checksum), and a cut one.
	good := fdelta.Create(dashState(1), dashState(2))
	vs = append(vs, fossilVector{Name: "wrong origin", Origin: bytes.Repeat([]byte("z"), len(dashState(1))), Delta: good, Bad: true})
	vs = append(vs, fossilVector{Name: "truncated", Origin: dashState(1), Delta: good[:len(good)-3], Bad: true})
	vs = append(vs, fossilVector{Name: "no size", Origin: dashState(1), Delta: []byte("@0,;"), Bad: true})
	return vs
}

// TestFossilVectors: the shared vectors are what this Fossil library makes,
// and each applies (or fails) as written.
func TestFossilVectors(t *testing.T) {
	vs := makeFossilVectors()
	b, err := json.MarshalIndent(vs, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *updateFossil {
		if err := os.WriteFile(fossilVectorsPath, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	stored, err := os.ReadFile(fossilVectorsPath)
	if err != nil {
		t.Fatal(err)
	}
	var got []fossilVector
	if err := json.Unmarshal(stored, &got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, b) {
		t.Errorf("%s differs from what the library makes (rerun with -update-fossil after a deliberate change)", fossilVectorsPath)
	}
	for _, v := range got {
		out, err := fdelta.Apply(v.Origin, v.Delta)
		switch {
		case v.Bad && err == nil:
			t.Errorf("%s: applied, want an error", v.Name)
		case !v.Bad && err != nil:
			t.Errorf("%s: %v", v.Name, err)
		case !v.Bad && !bytes.Equal(out, v.Target):
			t.Errorf("%s: got %q, want %q", v.Name, out, v.Target)
		}
	}
	if len(got) < 10 {
		t.Fatalf("only %d vectors", len(got))
	}
}
