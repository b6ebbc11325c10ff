package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// writeECSet writes a JWKS file holding one P-256 key named kid.
func writeECSet(t *testing.T, path, kid string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	enc := func(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }
	x, y := make([]byte, 32), make([]byte, 32)
	k.X.FillBytes(x)
	k.Y.FillBytes(y)
	set := fmt.Sprintf(`{"keys":[{"kty":"EC","crv":"P-256","kid":%q,"x":%q,"y":%q}]}`, kid, enc(x), enc(y))
	if err := os.WriteFile(path, []byte(set), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestKeysDroppedByKIDRefreshToldByRun: a refresh for an unknown kid that
// drops a key tells the OnKeysDropped callback on the goroutine of Run,
// which its caller owns and stops, not on a goroutine nobody owns (which
// could run the callback after Run returned).
func TestKeysDroppedByKIDRefreshToldByRun(t *testing.T) {
	path := filepath.Join(t.TempDir(), "jwks.json")
	writeECSet(t, path, "a")
	j := newJWKS(Options{JWKSFile: path, JWKSMinInterval: time.Nanosecond, JWKSRefresh: time.Hour})
	if err := j.fetch(context.Background()); err != nil || !j.has("a") {
		t.Fatalf("first fetch: %v, has a: %v", err, j.has("a"))
	}
	told := make(chan string, 1)
	j.OnKeysDropped(func() {
		buf := make([]byte, 64<<10)
		told <- string(buf[:runtime.Stack(buf, false)])
	})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		j.Run(stop, func(string, ...any) {})
	}()
	defer func() {
		close(stop)
		<-done
	}()
	writeECSet(t, path, "b") // "a" is gone from the set
	if !j.refreshForKID(context.Background(), "b") {
		t.Fatal("kid b unknown after the refresh")
	}
	select {
	case stack := <-told:
		if !strings.Contains(stack, "(*JWKS).Run") {
			t.Fatalf("the key-drop callback ran on a goroutine of its own, not Run's:\n%s", stack)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the dropped key was never told")
	}
}
