package client

import (
	"context"
	"fmt"
	"time"

	"github.com/switchyard/switchyard/internal/wire"
)

// Token refresh: the gateway sends refresh_required before the session's
// token expires; with Options.TokenFunc the client fetches a new token and
// sends it with the refresh op, so the session lives on without a
// reconnect. Subscriptions the new token no longer allows are ended by the
// gateway; the client then ends them too and reports a *Error with code
// "forbidden" to Options.OnError.

// currentToken is the token for the next connection.
func (c *Client) currentToken(ctx context.Context) (string, error) {
	if c.opts.TokenFunc != nil {
		tok, err := c.opts.TokenFunc(ctx)
		if err != nil {
			return "", fmt.Errorf("client: getting a token: %w", err)
		}
		return tok, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.token, nil
}

// Refresh presents a new token on the open session and returns when the
// gateway accepted it, with the token's expiry (zero when it has none). The
// token is also used for later reconnects unless Options.TokenFunc is set.
// A refused token is a *Error (code "unauthorized" or "forbidden"); the
// session keeps its old token then.
func (c *Client) Refresh(ctx context.Context, token string) (time.Time, error) {
	f, err := c.roundTrip(ctx, func(id uint64) any {
		return refreshReq{Op: wire.OpRefresh, ID: id, Token: token}
	}, nil, nil)
	if err != nil {
		return time.Time{}, err
	}
	c.mu.Lock()
	c.token = token
	c.mu.Unlock()
	var exp time.Time
	if f.Expires != "" {
		exp, _ = time.Parse(time.RFC3339, f.Expires)
	}
	return exp, nil
}

// onRefreshRequired runs on the reader goroutine: it starts one refresh
// goroutine unless one is running. The goroutine exits when the refresh is
// done or the client closes (Close waits for it).
func (c *Client) onRefreshRequired() {
	if c.opts.TokenFunc == nil {
		c.log.Warn("switchyard: the gateway asks for a token refresh and no TokenFunc is set")
		return
	}
	if !c.refreshing.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1) // the reader's own count is held, so Close's Wait has not returned
	go func() {
		defer c.wg.Done()
		defer c.refreshing.Store(false)
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.RequestTimeout)
		defer cancel()
		tok, err := c.opts.TokenFunc(ctx)
		if err == nil {
			_, err = c.Refresh(ctx, tok)
		}
		if err != nil && c.ctx.Err() == nil {
			c.disp.push(event{kind: evError, err: fmt.Errorf("client: refreshing the token: %w", err)})
		}
	}()
}

// onRevoked ends a subscription the gateway ended (a refreshed token no
// longer allows it).
func (c *Client) onRevoked(f *inFrame) {
	s := c.lookup(f.Pattern, f.Group)
	if s == nil {
		return
	}
	c.removeSub(s)
	c.disp.push(event{kind: evError, err: fmt.Errorf("client: subscription %q ended: %w", f.Pattern,
		&Error{Code: f.Reason, Message: "the refreshed token does not allow it"})})
}

type refreshReq struct {
	Op    string `json:"op"`
	ID    uint64 `json:"id"`
	Token string `json:"token"`
}
