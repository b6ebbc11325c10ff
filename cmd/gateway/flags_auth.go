package main

// Settings of auth: token keys, the admin key and anonymous access. The
// options that are values (audience, issuer, JWKS, refresh lead, admin
// key) are bound into router.AuthOptions; those that name files or lists
// to parse are kept in keySettings and read by authOptions at start (and
// again on a reload).

import (
	"crypto"
	"fmt"
	"os"
	"strings"

	"github.com/switchyard/switchyard/router"
)

// keySettings are the auth settings read or parsed at start.
type keySettings struct {
	HMACSecret         string
	HMACSecretFile     string
	PublicKeys         string // comma-separated files, each optionally kid=file
	Claims             string // name=claim,…
	AdminKeyFile       string
	AllowAnonymous     bool
	AnonymousSubscribe []string
	AnonymousPublish   []string
}

// defaultAnonymousSubscribe lets anonymous clients, once allowed in, read
// everything and publish nothing.
const defaultAnonymousSubscribe = "#,$sys.#"

func (c *config) authFlags(r *registry) {
	r.in(groupAuth)
	a, k := &c.Router.Auth, &c.Keys
	r.secret(&k.HMACSecret, "jwt-hmac-secret", "HS256 token secret, at least 32 bytes (prefer the environment or --jwt-hmac-secret-file)")
	r.string(&k.HMACSecretFile, "jwt-hmac-secret-file", "", "file of HS256 token secrets, one per line (several during a rotation)")
	r.string(&k.PublicKeys, "jwt-public-key", "", "comma-separated PEM files of RSA (RS256) or ECDSA (ES256/384/512) token verification keys")
	r.string(&a.Audience, "jwt-audience", "", "if set, tokens must carry this audience (aud)")
	r.string(&a.Issuer, "jwt-issuer", "", "if set, tokens must carry this issuer (iss)")
	r.string(&a.JWKSURL, "jwt-jwks-url", "", "identity provider's JWKS URL (RSA and EC keys selected by kid)")
	r.string(&a.JWKSFile, "jwt-jwks-file", "", "JWKS file (RSA and EC keys selected by kid), read again every --jwt-jwks-refresh")
	r.duration(&a.JWKSRefresh, "jwt-jwks-refresh", router.DefaultJWKSRefresh, "how often the JWKS is read again (also on an unknown kid, at most every 10s)")
	r.string(&a.Claims.Prefix, "jwt-claims-prefix", "", "prefix of the grant claims (publish, subscribe, groups), e.g. https://example.com/")
	r.string(&k.Claims, "jwt-claims", "", "grant claim names, e.g. publish=pub,subscribe=https://x/sub,groups=grp (overrides --jwt-claims-prefix)")
	r.duration(&a.RefreshLead, "jwt-refresh-lead", 0, "how long before a session's token expires it gets refresh_required (0: 30s or a tenth of the token's lifetime, whichever is less; negative: never)")
	r.secret(&a.AdminKey, "admin-key", "bearer key for the admin calls (topic create/delete, seek, dead letters), at least 16 characters")
	r.string(&k.AdminKeyFile, "admin-key-file", "", "file holding the admin key")
	r.bool(&k.AllowAnonymous, "allow-anonymous", false, "with keys configured, let clients without a token in with the anonymous grants")
	r.list(&k.AnonymousSubscribe, "anonymous-subscribe", splitList(defaultAnonymousSubscribe), "comma-separated patterns anonymous clients may subscribe to (with --allow-anonymous)")
	r.list(&k.AnonymousPublish, "anonymous-publish", nil, "comma-separated patterns anonymous clients may publish to (with --allow-anonymous)")
}

// claimNames parses --jwt-claims onto names.
func claimNames(spec string, names router.ClaimNames) (router.ClaimNames, error) {
	for _, kv := range splitList(spec) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || v == "" {
			return names, fmt.Errorf("jwt-claims: %q is not name=claim", kv)
		}
		switch k {
		case "publish":
			names.Publish = v
		case "subscribe":
			names.Subscribe = v
		case "groups":
			names.Groups = v
		default:
			return names, fmt.Errorf("jwt-claims: unknown grant %q (publish, subscribe or groups)", k)
		}
	}
	return names, nil
}

// authOptions reads the key files and builds the router's authentication
// options. Errors name the file, never its contents.
func authOptions(cfg config) (router.AuthOptions, error) {
	a, k := cfg.Router.Auth, cfg.Keys
	if k.HMACSecret != "" {
		a.HMACSecrets = append(a.HMACSecrets, []byte(k.HMACSecret))
	}
	if k.HMACSecretFile != "" {
		data, err := os.ReadFile(k.HMACSecretFile)
		if err != nil {
			return a, fmt.Errorf("jwt-hmac-secret-file: %w", err)
		}
		for _, line := range strings.Split(string(data), "\n") {
			if line = strings.TrimRight(line, "\r"); strings.TrimSpace(line) != "" {
				a.HMACSecrets = append(a.HMACSecrets, []byte(line))
			}
		}
	}
	if err := readPublicKeys(&a, k.PublicKeys); err != nil {
		return a, err
	}
	var err error
	if a.Claims, err = claimNames(k.Claims, a.Claims); err != nil {
		return a, err
	}
	if k.AdminKeyFile != "" {
		data, err := os.ReadFile(k.AdminKeyFile)
		if err != nil {
			return a, fmt.Errorf("admin-key-file: %w", err)
		}
		a.AdminKey = strings.TrimSpace(string(data))
	}
	if k.AllowAnonymous {
		a.Anonymous = &router.Grants{Subscribe: k.AnonymousSubscribe, Publish: k.AnonymousPublish}
	}
	return a, nil
}

// readPublicKeys reads --jwt-public-key's files into a.
func readPublicKeys(a *router.AuthOptions, files string) error {
	for _, file := range splitList(files) {
		kid, named := "", false
		if k, f, ok := strings.Cut(file, "="); ok {
			kid, file, named = k, f, true
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return fmt.Errorf("jwt-public-key: %w", err)
		}
		keys, err := router.ParsePublicKeys(data)
		if err != nil {
			return fmt.Errorf("jwt-public-key %s: %w", file, err)
		}
		if named {
			if len(keys) != 1 {
				return fmt.Errorf("jwt-public-key %s: a key id names one key; the file holds %d", file, len(keys))
			}
			if a.NamedKeys == nil {
				a.NamedKeys = map[string]crypto.PublicKey{}
			}
			a.NamedKeys[kid] = keys[0]
			continue
		}
		a.PublicKeys = append(a.PublicKeys, keys...)
	}
	return nil
}
