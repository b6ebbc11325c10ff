// Package trie validates Switchyard topic and pattern names and indexes
// subscriptions by pattern so that a published topic finds its subscribers
// quickly.
//
// Topics are 1 to 16 dot-separated segments; patterns may use '*' for exactly
// one segment and a trailing '#' for one or more. Matches is the reference
// semantics; Trie is the index the gateway's fan-out uses.
package trie
