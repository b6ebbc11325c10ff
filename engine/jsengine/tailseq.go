package jsengine

// The stream sequence of a tailed record, read from its reply subject by
// hand. jetstream.Msg.Metadata splits the whole subject and allocates the
// metadata, once for every record the live tail reads; the tail needs the
// stream sequence alone. streamSeqOf gives what Metadata gives for it: the
// same subjects accepted (nine tokens, or eleven or more, after "$JS.ACK."),
// the same token read, as nats.go's parser reads numbers (tailseq_test.go
// compares them on a table and under fuzzing).

import "strings"

// streamSeqOf returns the stream sequence in a JetStream message's reply
// subject; ok is false where Metadata fails for a message bound to a
// subscription.
func streamSeqOf(reply string) (seq uint64, ok bool) {
	if reply == "" {
		return 0, false
	}
	tokens := strings.Count(reply, ".") + 1
	if tokens < 9 || (tokens > 9 && tokens < 11) || !strings.HasPrefix(reply, "$JS.ACK.") {
		return 0, false
	}
	// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>... (nine tokens), or
	// $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>...
	skip := 3
	if tokens > 9 {
		skip = 5
	}
	s := reply[len("$JS.ACK."):]
	for range skip {
		s = s[strings.IndexByte(s, '.')+1:]
	}
	if i := strings.IndexByte(s, '.'); i >= 0 {
		s = s[:i]
	}
	return parseNum(s), true
}

// parseNum reads a number as nats.go's parser does: 0 for anything but
// decimal digits, wrapping past the largest uint64.
func parseNum(s string) (n uint64) {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}
