package client_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/switchyard/switchyard/client"
)

// TestTokenSentInHeaderNotURL: the client's token goes in the handshake's
// Authorization header, never in the URL (where proxies and access logs
// keep it).
func TestTokenSentInHeaderNotURL(t *testing.T) {
	var mu sync.Mutex
	var query, auth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		query, auth = r.URL.RawQuery, r.Header.Get("Authorization")
		mu.Unlock()
		http.Error(w, `{"code":"unauthorized","message":"no"}`, http.StatusUnauthorized)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, srv.URL, &client.Options{Token: "sekrit.token.value"})
	if err == nil {
		c.Close()
		t.Fatal("dial succeeded against a server that refuses every handshake")
	}
	mu.Lock()
	defer mu.Unlock()
	if query != "" {
		t.Errorf("handshake URL query %q, want none (the token belongs in a header)", query)
	}
	if auth != "Bearer sekrit.token.value" {
		t.Errorf("Authorization header %q, want the bearer token", auth)
	}
}
