package auth

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Identity-provider keys: a JSON Web Key Set (RFC 7517) read from a URL or
// a file, holding RSA and EC public keys named by "kid". A token whose
// header names a kid is verified with that key only; a token without a kid
// with every key of its algorithm. The set is fetched again every
// Options.JWKSRefresh and when a token names an unknown kid (at most
// once per Options.JWKSMinInterval, so a stream of forged kids cannot
// turn the gateway into a load generator); a failed fetch keeps the last
// good set.
//
// Concurrency: a JWKS is safe for concurrent use. The current set is an
// immutable value behind an atomic pointer; fetches are serialized by
// fetchMu. Run refreshes the set on the caller's goroutine until its stop
// channel is closed.

// DefaultJWKSRefresh is AuthOptions.JWKSRefresh's default.
const DefaultJWKSRefresh = defaultJWKSRefresh

// Defaults of the JWKS options.
const (
	defaultJWKSRefresh     = 5 * time.Minute  // identity providers rotate keys over days; a few minutes' lag is harmless
	defaultJWKSMinInterval = 10 * time.Second // bounds fetches caused by unknown kids
	jwksFetchTimeout       = 5 * time.Second
	maxJWKSBytes           = 1 << 20
	maxJWKSKeys            = 256
)

// keySet is one parsed JWKS: keys by kid and the keys that have none.
type keySet struct {
	byKID   map[string]jwk
	unnamed []jwk
}

// jwk is one usable key: its public key and, when the set said so, the one
// algorithm it may verify.
type jwk struct {
	key crypto.PublicKey
	alg string // "" when the JWK has no "alg"
}

// fits reports whether k may verify a token signed with alg.
func (k jwk) fits(alg string) bool {
	if k.alg != "" && k.alg != alg {
		return false
	}
	switch pk := k.key.(type) {
	case *rsa.PublicKey:
		return alg == "RS256" || alg == "RS384" || alg == "RS512"
	case *ecdsa.PublicKey:
		switch pk.Curve {
		case elliptic.P256():
			return alg == "ES256"
		case elliptic.P384():
			return alg == "ES384"
		case elliptic.P521():
			return alg == "ES512"
		}
	}
	return false
}

// jwksAlgs are the algorithms a JWKS may bring in.
var jwksAlgs = []string{"RS256", "RS384", "RS512", "ES256", "ES384", "ES512"}

// JWKS is the key set read from Options.JWKSURL or Options.JWKSFile.
type JWKS struct {
	url, file   string
	client      *http.Client
	every       time.Duration
	minInterval time.Duration

	set atomic.Pointer[keySet]

	fetchMu   sync.Mutex // serializes fetches; guards lastFetch
	lastFetch time.Time

	ok, failed, limited atomic.Uint64 // fetch outcomes of this set
	total               *FetchCounts  // Options.JWKSCounts; nil: none
	lastErr             atomic.Pointer[string]

	onDrop atomic.Pointer[func()] // OnKeysDropped (jwks_drop.go)
	// dropped holds a drop found by refreshForKID, which holds fetchMu
	// and runs on a verifying caller: Run tells it.
	dropped chan struct{}
}

// FetchCounts count key set fetches by outcome (see Options.JWKSCounts).
// It is safe for concurrent use.
type FetchCounts struct {
	OK, Failed, Limited atomic.Uint64
}

func newJWKS(o Options) *JWKS {
	j := &JWKS{url: o.JWKSURL, file: o.JWKSFile, total: o.JWKSCounts, client: o.JWKSClient, every: o.JWKSRefresh, minInterval: o.JWKSMinInterval,
		dropped: make(chan struct{}, 1)}
	if j.client == nil {
		j.client = &http.Client{Timeout: jwksFetchTimeout}
	}
	if j.every <= 0 {
		j.every = defaultJWKSRefresh
	}
	if j.minInterval <= 0 {
		j.minInterval = defaultJWKSMinInterval
	}
	j.set.Store(&keySet{})
	return j
}

// lookup returns the keys that may verify a token of alg naming kid ("" for
// none).
func (j *JWKS) lookup(kid, alg string) []crypto.PublicKey {
	set := j.set.Load()
	if kid != "" {
		if k, ok := set.byKID[kid]; ok && k.fits(alg) {
			return []crypto.PublicKey{k.key}
		}
		return nil
	}
	var out []crypto.PublicKey
	for _, k := range set.unnamed {
		if k.fits(alg) {
			out = append(out, k.key)
		}
	}
	for _, k := range set.byKID {
		if k.fits(alg) {
			out = append(out, k.key)
		}
	}
	return out
}

// has reports whether the current set names kid.
func (j *JWKS) has(kid string) bool {
	_, ok := j.set.Load().byKID[kid]
	return ok
}

// fetch reads and parses the set and installs it; on any error the last
// good set stays.
func (j *JWKS) fetch(ctx context.Context) error {
	j.fetchMu.Lock()
	dropped, err := j.fetchLocked(ctx)
	j.fetchMu.Unlock()
	j.tellDropped(dropped)
	return err
}

// fetchLocked fetches the set and installs it; dropped reports whether the
// new set lacks a key of the one it replaced (see OnKeysDropped).
func (j *JWKS) fetchLocked(ctx context.Context) (dropped bool, err error) {
	j.lastFetch = time.Now()
	set, err := j.read(ctx)
	if err != nil {
		j.failed.Add(1)
		if j.total != nil {
			j.total.Failed.Add(1)
		}
		msg := err.Error()
		j.lastErr.Store(&msg)
		return false, err
	}
	j.ok.Add(1)
	if j.total != nil {
		j.total.OK.Add(1)
	}
	old := j.set.Swap(set)
	return old != nil && droppedKeys(old, set), nil
}

// refreshForKID fetches the set again because a token named a kid it does
// not hold, unless the last fetch was less than minInterval ago. It reports
// whether kid is known afterwards.
func (j *JWKS) refreshForKID(ctx context.Context, kid string) bool {
	j.fetchMu.Lock()
	defer j.fetchMu.Unlock()
	if j.has(kid) {
		return true // another caller fetched it meanwhile
	}
	if time.Since(j.lastFetch) < j.minInterval {
		j.limited.Add(1)
		if j.total != nil {
			j.total.Limited.Add(1)
		}
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, jwksFetchTimeout)
	defer cancel()
	if dropped, _ := j.fetchLocked(ctx); dropped {
		// Told by Run: this caller holds fetchMu, under which the
		// callback must not run, and is verifying a token.
		select {
		case j.dropped <- struct{}{}:
		default: // one is already waiting to be told
		}
	}
	return j.has(kid)
}

// Run refreshes the set every Options.JWKSRefresh until stop is closed,
// logging failed fetches with log, and calls the OnKeysDropped callback
// for the drops a refresh for an unknown kid found.
func (j *JWKS) Run(stop <-chan struct{}, log func(msg string, args ...any)) {
	t := time.NewTicker(j.every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-j.dropped:
			j.tellDropped(true)
			continue
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), jwksFetchTimeout)
		go func() { // exits when run's select returns or the fetch ends
			select {
			case <-stop:
			case <-ctx.Done():
			}
			cancel()
		}()
		if err := j.fetch(ctx); err != nil {
			log("JWKS refresh failed; keeping the last good key set", "err", err)
		}
		cancel()
	}
}

func (j *JWKS) read(ctx context.Context) (*keySet, error) {
	var data []byte
	if j.file != "" {
		b, err := os.ReadFile(j.file)
		if err != nil {
			return nil, fmt.Errorf("router: JWKS file: %w", err)
		}
		data = b
	} else {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.url, nil)
		if err != nil {
			return nil, fmt.Errorf("router: JWKS URL: %w", err)
		}
		req.Header.Set("Accept", "application/json")
		resp, err := j.client.Do(req)
		if err != nil {
			return nil, fmt.Errorf("router: fetching JWKS: %w", err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("router: fetching JWKS: HTTP %d", resp.StatusCode)
		}
		data, err = io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
		if err != nil {
			return nil, fmt.Errorf("router: fetching JWKS: %w", err)
		}
		if len(data) > maxJWKSBytes {
			return nil, fmt.Errorf("router: JWKS is larger than %d bytes", maxJWKSBytes)
		}
	}
	return parseJWKS(data)
}

// parseJWKS reads a key set. Keys of other types, keys for encryption
// ("use":"enc") and keys that do not parse are skipped; a set with no
// usable key is an error.
func parseJWKS(data []byte) (*keySet, error) {
	var doc struct {
		Keys []struct {
			Kty string `json:"kty"`
			Kid string `json:"kid"`
			Use string `json:"use"`
			Alg string `json:"alg"`
			N   string `json:"n"`
			E   string `json:"e"`
			Crv string `json:"crv"`
			X   string `json:"x"`
			Y   string `json:"y"`
		} `json:"keys"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, errors.New("router: JWKS is not a JSON key set")
	}
	set := &keySet{byKID: map[string]jwk{}}
	for _, k := range doc.Keys {
		if len(set.byKID)+len(set.unnamed) >= maxJWKSKeys {
			break
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		var pk crypto.PublicKey
		switch k.Kty {
		case "RSA":
			n, err1 := b64Int(k.N)
			e, err2 := b64Int(k.E)
			if err1 != nil || err2 != nil || !e.IsInt64() || e.Int64() < 3 || e.Int64() > 1<<31 || n.BitLen() < 2048 {
				continue
			}
			pk = &rsa.PublicKey{N: n, E: int(e.Int64())}
		case "EC":
			var curve elliptic.Curve
			switch k.Crv {
			case "P-256":
				curve = elliptic.P256()
			case "P-384":
				curve = elliptic.P384()
			case "P-521":
				curve = elliptic.P521()
			default:
				continue
			}
			x, err1 := b64Int(k.X)
			y, err2 := b64Int(k.Y)
			if err1 != nil || err2 != nil {
				continue
			}
			ek := &ecdsa.PublicKey{Curve: curve, X: x, Y: y}
			if _, err := ek.ECDH(); err != nil { // not a point on the curve
				continue
			}
			pk = ek
		default:
			continue
		}
		key := jwk{key: pk, alg: k.Alg}
		if k.Kid == "" {
			set.unnamed = append(set.unnamed, key)
		} else {
			set.byKID[k.Kid] = key
		}
	}
	if len(set.byKID)+len(set.unnamed) == 0 {
		return nil, errors.New("router: JWKS holds no usable RSA or EC signing key")
	}
	return set, nil
}

func b64Int(s string) (*big.Int, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) == 0 {
		return nil, errors.New("bad base64url integer")
	}
	return new(big.Int).SetBytes(b), nil
}

// Fetches reports the fetches so far by outcome: ok, failed, and
// rate_limited (an unknown kid within Options.JWKSMinInterval of the last
// fetch).
func (j *JWKS) Fetches() (ok, failed, limited uint64) {
	return j.ok.Load(), j.failed.Load(), j.limited.Load()
}

// Keys is the number of keys in the current set.
func (j *JWKS) Keys() int {
	s := j.set.Load()
	return len(s.byKID) + len(s.unnamed)
}

// LastError is the error of the last failed fetch, "" when none failed.
func (j *JWKS) LastError() string {
	if p := j.lastErr.Load(); p != nil {
		return *p
	}
	return ""
}
