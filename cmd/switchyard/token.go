package main

// switchyard token mints a development token: HS256 from the gateway's
// HMAC secret (the first line of its --jwt-hmac-secret-file), or RS256 /
// ES256-384-512 from a PEM private key whose public key the gateway has
// (--jwt-public-key). The grants are the claims the gateway reads by
// default (publish, subscribe, groups); the lifetime sets exp.

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

func runToken(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("token")
	secretFile := fs.String("secret-file", "", "the gateway's HMAC secret file (its --jwt-hmac-secret-file; the first line is used)")
	keyFile := fs.String("key-file", "", "a PEM private key (RSA or ECDSA) whose public key the gateway has (--jwt-public-key)")
	kid := fs.String("kid", "", "with --key-file: the key id put in the token's header")
	sub := fs.String("sub", "", "the token's subject: the user the gateway shows in presence and sessions")
	var publish, subscribe, groups stringList
	fs.Var(&publish, "publish", "a pattern the token may publish to (repeatable, or comma-separated)")
	fs.Var(&subscribe, "subscribe", "a pattern the token may subscribe to (repeatable, or comma-separated)")
	fs.Var(&groups, "groups", "a group name or pattern the token may use (repeatable, or comma-separated)")
	ttl := fs.Duration("ttl", time.Hour, "the token's lifetime")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	if (*secretFile == "") == (*keyFile == "") {
		return usagef("token needs --secret-file (the gateway's HMAC secret) or --key-file (a PEM private key), one of them")
	}
	if *ttl <= 0 {
		return usagef("--ttl %v: the lifetime must be positive, such as 1h", *ttl)
	}
	now := time.Now()
	claims := jwt.MapClaims{"iat": now.Unix(), "exp": now.Add(*ttl).Unix()}
	if *sub != "" {
		claims["sub"] = *sub
	}
	for name, l := range map[string]stringList{"publish": publish, "subscribe": subscribe, "groups": groups} {
		if list := splitComma(l); len(list) > 0 {
			claims[name] = list
		}
	}
	var tok string
	var err error
	if *secretFile != "" {
		tok, err = hmacToken(*secretFile, claims)
	} else {
		tok, err = keyToken(*keyFile, *kid, claims)
	}
	if err != nil {
		return err
	}
	if g.jsonOut() {
		return g.emit(map[string]any{"token": tok, "expires": now.Add(*ttl).UTC().Format(time.RFC3339)})
	}
	g.printf("%s\n", tok)
	return nil
}

func hmacToken(file string, claims jwt.MapClaims) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--secret-file: %w", err)
	}
	secret, _, _ := strings.Cut(string(data), "\n")
	secret = strings.TrimRight(secret, "\r")
	if len(secret) < 32 {
		return "", fmt.Errorf("--secret-file %s: the first line is %d bytes; the gateway needs an HMAC secret of at least 32", file, len(secret))
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(secret))
}

func keyToken(file, kid string, claims jwt.MapClaims) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("--key-file: %w", err)
	}
	var t *jwt.Token
	var key any
	if k, err := jwt.ParseRSAPrivateKeyFromPEM(data); err == nil {
		t, key = jwt.NewWithClaims(jwt.SigningMethodRS256, claims), (*rsa.PrivateKey)(k)
	} else if k, err := jwt.ParseECPrivateKeyFromPEM(data); err == nil {
		var m jwt.SigningMethod
		switch k.Curve.Params().BitSize {
		case 256:
			m = jwt.SigningMethodES256
		case 384:
			m = jwt.SigningMethodES384
		case 521:
			m = jwt.SigningMethodES512
		default:
			return "", fmt.Errorf("--key-file %s: the curve %s is not P-256, P-384 or P-521", file, k.Curve.Params().Name)
		}
		t, key = jwt.NewWithClaims(m, claims), (*ecdsa.PrivateKey)(k)
	} else {
		return "", fmt.Errorf("--key-file %s: not a PEM RSA or ECDSA private key", file)
	}
	if kid != "" {
		t.Header["kid"] = kid
	}
	return t.SignedString(key)
}

// splitComma flattens repeated, comma-separated values.
func splitComma(l stringList) []string {
	var out []string
	for _, v := range l {
		for _, p := range strings.Split(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
