package auth

// Keys dropped by a refresh. A periodic refresh (Run) or a refresh for an
// unknown kid that installs a set lacking a key of the previous one (a kid
// gone or bound to another key, or an unnamed key gone) calls the
// OnKeysDropped callback, with no lock of the JWKS held, so that the
// sessions whose tokens that key signed are checked again.

import "crypto"

// OnKeysDropped makes every later fetch that drops a key call f (nil: no
// call), after the new set is in force: a periodic or explicit fetch calls
// it on the fetching goroutine, a refresh for an unknown kid hands it to
// Run's goroutine (a drop found while Run is not running is told when it
// runs). f must return quickly.
func (j *JWKS) OnKeysDropped(f func()) {
	if f == nil {
		j.onDrop.Store(nil)
		return
	}
	j.onDrop.Store(&f)
}

func (j *JWKS) tellDropped(dropped bool) {
	if !dropped {
		return
	}
	if f := j.onDrop.Load(); f != nil {
		(*f)()
	}
}

// droppedKeys reports whether next lacks a key of old.
func droppedKeys(old, next *keySet) bool {
	for kid, k := range old.byKID {
		n, ok := next.byKID[kid]
		if !ok || !sameKey(k, n) {
			return true
		}
	}
	for _, k := range old.unnamed {
		found := false
		for _, n := range next.unnamed {
			if sameKey(k, n) {
				found = true
				break
			}
		}
		if !found {
			return true
		}
	}
	return false
}

// sameKey reports whether a and b are the same key for the same use.
func sameKey(a, b jwk) bool {
	eq, ok := a.key.(interface{ Equal(crypto.PublicKey) bool })
	return ok && eq.Equal(b.key) && a.alg == b.alg
}
