package apicheck

// Validation on the client's side of the connection, for tests that reach
// a gateway they cannot wrap (one started by the gateway command's run).

import (
	"bytes"
	"io"
	"net"
	"net/http"
	"sync"
)

// Hosts is a set of "host:port" addresses: the gateways a Transport
// checks. The zero value is empty and ready to use; it is safe for
// concurrent use by multiple goroutines.
type Hosts struct {
	mu  sync.Mutex // guards set
	set map[string]bool
}

// Add adds the address of a gateway ("127.0.0.1:8080", "[::1]:80").
func (h *Hosts) Add(addr string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.set == nil {
		h.set = map[string]bool{}
	}
	h.set[addr] = true
	if host, port, err := net.SplitHostPort(addr); err == nil && (host == "" || host == "::" || host == "0.0.0.0") {
		// A gateway listening on every address is reached on loopback.
		h.set[net.JoinHostPort("127.0.0.1", port)] = true
		h.set[net.JoinHostPort("localhost", port)] = true
	}
}

// Has reports whether r goes to one of the addresses.
func (h *Hosts) Has(r *http.Request) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.set[r.URL.Host]
}

// Transport returns a RoundTripper that sends requests with base and
// validates every response to a request that only accepts (nil: every
// request) as Wrap does on the server's side. A WebSocket upgrade is
// passed on untouched; an event stream's events are validated when its
// body is closed, up to MaxCheckedBody.
func (a *Checker) Transport(base http.RoundTripper, only func(*http.Request) bool) http.RoundTripper {
	return &checkingTransport{a: a, base: base, only: only}
}

type checkingTransport struct {
	a    *Checker
	base http.RoundTripper
	only func(*http.Request) bool
}

func (c *checkingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.base.RoundTrip(r)
	if err != nil || (c.only != nil && !c.only(r)) || r.Method == http.MethodOptions {
		return resp, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		counts.upgrades.Add(1)
		return resp, err
	}
	if isEventStream(resp.Header) {
		resp.Body = &teeBody{ReadCloser: resp.Body, done: func(body []byte) {
			c.a.checkResponse(r, resp.StatusCode, resp.Header, body)
		}}
		return resp, nil
	}
	body, rerr := io.ReadAll(io.LimitReader(resp.Body, MaxCheckedBody+1))
	rest := resp.Body
	resp.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(body), rest), rest}
	if rerr == nil && len(body) <= MaxCheckedBody {
		c.a.checkResponse(r, resp.StatusCode, resp.Header, body)
	}
	return resp, nil
}

// teeBody keeps what is read of an event stream, up to MaxCheckedBody,
// and hands it to done once, when the body is closed.
type teeBody struct {
	io.ReadCloser
	mu   sync.Mutex // guards buf and once's call
	buf  bytes.Buffer
	once sync.Once
	done func([]byte)
}

func (b *teeBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.mu.Lock()
	if b.buf.Len()+n <= MaxCheckedBody {
		b.buf.Write(p[:n])
	}
	b.mu.Unlock()
	return n, err
}

func (b *teeBody) Close() error {
	err := b.ReadCloser.Close()
	b.once.Do(func() {
		b.mu.Lock()
		body := bytes.Clone(b.buf.Bytes())
		b.mu.Unlock()
		b.done(body)
	})
	return err
}

func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= len("text/event-stream") && ct[:len("text/event-stream")] == "text/event-stream"
}
