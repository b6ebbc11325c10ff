package trie

// Covers reports whether every topic that pattern requested matches is also
// matched by pattern allowed, so that a grant of allowed permits a
// subscription to requested. A topic is a pattern too. Covers reports false
// if either pattern is invalid.
//
// For example, "orders.#" covers "orders.*.eu", but "orders.*" does not
// cover "orders.#", and "#" does not cover "$sys.x" because a leading
// wildcard never matches a '$' topic.
func Covers(allowed, requested string) bool {
	if ValidatePattern(allowed) != nil || ValidatePattern(requested) != nil {
		return false
	}
	var abuf, rbuf [MaxSegments]string
	a, r := split(allowed, &abuf), split(requested, &rbuf)
	aRest, rRest := a[len(a)-1] == "#", r[len(r)-1] == "#"

	// Every valid pattern matches some topic, so coverage is decided by the
	// topic lengths each allows and then segment by segment.
	switch {
	case rRest && !aRest:
		// requested matches topics of any length above a bound; allowed
		// only of one length.
		return false
	case aRest:
		// allowed matches len(a) or more segments, requested len(r) or
		// more (rRest) or exactly len(r).
		if len(r) < len(a) {
			return false
		}
	default:
		if len(r) != len(a) {
			return false
		}
	}
	// Now len(a) <= len(r). Each allowed segment must cover the requested
	// segment in its place; a trailing '#' in allowed covers all of the
	// requested segments from its place on, which are at least one.
	for i := range a {
		if !segmentCovers(a[i], r[i], i == 0) {
			return false
		}
	}
	return true
}

// segmentCovers reports whether pattern segment a matches every segment that
// pattern segment r stands for, at the first position or a later one.
func segmentCovers(a, r string, first bool) bool {
	if a == "*" && r == "#" {
		return false // one segment against one or more; Covers rules it out earlier
	}
	if a == "*" || a == "#" {
		// A wildcard matches any segment, except that in the first
		// position it does not match '$' segments. A wildcard r stands for
		// none of those either, so only a '$' literal is left uncovered.
		return !first || r[0] != '$'
	}
	return a == r
}
