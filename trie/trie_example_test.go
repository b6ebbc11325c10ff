package trie_test

import (
	"errors"
	"fmt"
	"slices"

	"github.com/switchyard/switchyard/trie"
)

func Example() {
	subs := trie.New[string]()
	subs.Add("orders.*.eu", "alice")
	subs.Add("orders.#", "bob")
	subs.Add("orders.#", "carol")
	subs.Add("payments.#", "dave")

	var lines []string
	subs.Match("orders.created.eu", func(pattern string, who []string) {
		// who is valid only during the call: copy what you keep.
		lines = append(lines, fmt.Sprintf("%s %v", pattern, who))
	})
	slices.Sort(lines) // Match reports patterns in no particular order
	for _, l := range lines {
		fmt.Println(l)
	}
	fmt.Println(subs.Len(), "subscriptions,", subs.Patterns(), "patterns")
	// Output:
	// orders.# [bob carol]
	// orders.*.eu [alice]
	// 4 subscriptions, 3 patterns
}

func ExampleTrie_Add() {
	subs := trie.New[int]()
	err := subs.Add("orders.#.eu", 1)
	fmt.Println(errors.Is(err, trie.ErrInvalidPattern))
	fmt.Println(err)
	// Output:
	// true
	// trie: invalid pattern "orders.#.eu": segment 2 is "#", which is allowed only as the last segment (it matches one or more trailing segments)
}

func ExampleMatches() {
	fmt.Println(trie.Matches("orders.#", "orders"))
	fmt.Println(trie.Matches("orders.#", "orders.a.b"))
	fmt.Println(trie.Matches("#", "$sys.stats"))
	fmt.Println(trie.Matches("$sys.#", "$sys.stats"))
	// Output:
	// false
	// true
	// false
	// true
}

func ExampleCovers() {
	fmt.Println(trie.Covers("orders.#", "orders.*.eu"))
	fmt.Println(trie.Covers("orders.*", "orders.#"))
	fmt.Println(trie.Covers("#", "$sys.x"))
	fmt.Println(trie.Covers("a.*.#", "a.#"))
	// Output:
	// true
	// false
	// false
	// false
}

func ExampleValidateTopic() {
	for _, name := range []string{"orders.created.eu", "orders.*", "a..b", "$sys.stats"} {
		fmt.Printf("%s: %v\n", name, trie.ValidateTopic(name))
	}
	// Output:
	// orders.created.eu: <nil>
	// orders.*: trie: invalid topic "orders.*": segment 2 has "*", a wildcard: wildcards are allowed in patterns, not in topics
	// a..b: trie: invalid topic "a..b": segment 2 is empty (segments are separated by single dots)
	// $sys.stats: <nil>
}
