package router_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"net/url"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/router"
)

// memStats returns the runtime's memory statistics after a full
// collection, so HeapAlloc is the live heap.
func memStats() runtime.MemStats {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m
}

// smallSendBuffers is a listener whose connections have a 4 KiB send
// buffer, so that a response its client does not read stays with the
// gateway instead of in the kernel.
type smallSendBuffers struct{ net.Listener }

func (l smallSendBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		_ = c.(*net.TCPConn).SetWriteBuffer(4096)
	}
	return c, err
}

// smallReceiveBuffer makes a dialled socket's receive buffer 4 KiB before
// it connects (so the window it advertises is small too).
func smallReceiveBuffer(_, _ string, rc syscall.RawConn) error {
	var serr error
	if err := rc.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); err != nil {
		return err
	}
	return serr
}

// stalledReader sends GET path over a raw TCP connection with a small
// receive buffer, reads the status line (so the handler has listed and
// started writing) and then reads nothing more. The connection closes when
// the test ends.
func stalledReader(t *testing.T, addr, path string) {
	t.Helper()
	d := net.Dialer{Timeout: waitTimeout, Control: smallReceiveBuffer}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: gateway\r\n\r\n", path); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReaderSize(c, 16).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
		t.Fatalf("GET %s: status line %q, %v", path, line, err)
	}
}

// nopConsumer is a group member that takes deliveries and does nothing.
type nopConsumer struct{}

func (nopConsumer) Deliver(engine.Delivery)                   {}
func (nopConsumer) Skipped(string, string, int, int64, int64) {}

// TestStalledListingReadersHoldAboutOnePage: on a gateway with 20,000
// topics and 5,000 groups, clients that ask for a page of GET /v1/topics or
// GET /v1/groups and stop reading make the gateway hold about a page each,
// not the listing: neither while they stall (the heap in use) nor at any
// moment before (the heap each request allocated, which bounds what it can
// have held).
func TestStalledListingReadersHoldAboutOnePage(t *testing.T) {
	g := newGateway(t)
	ctx := context.Background()
	const topics, groups = 20000, 5000
	for i := range groups { // before the topics: a join scans the topics
		req := engine.JoinRequest{Group: fmt.Sprintf("g%04d", i), Pattern: fmt.Sprintf("spray.t%05d", i), Member: "m"}
		if _, err := g.eng.Join(ctx, req, nopConsumer{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := range topics {
		if _, err := g.eng.CreateTopic(ctx, engine.TopicConfig{Name: fmt.Sprintf("spray.t%05d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewUnstartedServer(g.rt)
	srv.Listener = smallSendBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	// stall has readers stall on path and returns the heap they hold
	// and the heap each request allocated.
	const readers = 10
	stall := func(t *testing.T, path string) (held, allocated uint64) {
		before := memStats()
		for range readers {
			stalledReader(t, srv.Listener.Addr().String(), path)
		}
		after := memStats()
		if after.HeapAlloc > before.HeapAlloc {
			held = after.HeapAlloc - before.HeapAlloc
		}
		return held, (after.TotalAlloc - before.TotalAlloc) / readers
	}

	_, next, _ := getPage(t, g, "/v1/topics?limit=1000", "topics")
	for _, tt := range []struct{ path, one, key string }{
		{"/v1/topics", "/v1/topics/spray.t00000", "topics"},
		{"/v1/topics?cursor=" + url.QueryEscape(next), "/v1/topics/spray.t00000", "topics"},
		{"/v1/groups", "/v1/groups/g0000", "groups"},
	} {
		t.Run(tt.path, func(t *testing.T) {
			items, _, pageBytes := getPage(t, g, tt.path, tt.key)
			if len(items) < 2 {
				t.Fatalf("GET %s: %d items", tt.path, len(items))
			}
			// A request for one item (not a listing) allocates what any
			// request does: the connection's buffers and request state. A page adds,
			// per item, the engine's description, its JSON view, the
			// encoded JSON and its share of the page's buffer (which
			// grows by doubling): about six times the page, and up to
			// twelve under the race detector, whose pools keep less. A
			// listing built whole is the page times the number of pages
			// (200 here). A stalled request holds the encoded page and
			// its connection.
			_, perRequest := stall(t, tt.one)
			allocBound := perRequest + uint64(16*pageBytes)
			heldBound := uint64(readers*(2*pageBytes+64<<10)) + 4<<20

			held, allocated := stall(t, tt.path)
			t.Logf("%d stalled readers of %d-byte pages: %d KiB held in all (bound %d KiB), %d KiB allocated per request (bound %d KiB; %d KiB for one item)",
				readers, pageBytes, held>>10, heldBound>>10, allocated>>10, allocBound>>10, perRequest>>10)
			if held > heldBound {
				t.Errorf("%d stalled readers hold %d KiB of heap, more than %d KiB: about one %d-byte page each",
					readers, held>>10, heldBound>>10, pageBytes)
			}
			if allocated > allocBound {
				t.Errorf("a listing request allocated %d KiB, more than %d KiB: about one %d-byte page",
					allocated>>10, allocBound>>10, pageBytes)
			}
		})
	}
}

// pageCounter counts the topics the engine built for listings.
type pageCounter struct {
	engine.Engine
	built atomic.Int64
}

func (p *pageCounter) TopicsPage(ctx context.Context, after string, limit int) ([]engine.TopicInfo, bool, error) {
	ts, more, err := p.Engine.TopicsPage(ctx, after, limit)
	p.built.Add(int64(len(ts)))
	return ts, more, err
}

// TestLargeTopicsListedByBytes: when topics are large (1,024 partitions,
// about 80 KiB of JSON each), a page of up to 1,000 stops at the byte
// bound, and the gateway builds little more than the topics it sends.
func TestLargeTopicsListedByBytes(t *testing.T) {
	pc := &pageCounter{}
	g := newGateway(t, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine { pc.Engine = e; return pc }
	})
	const topics = 60
	for i := range topics {
		if _, err := g.eng.CreateTopic(context.Background(), engine.TopicConfig{Name: fmt.Sprintf("wide.t%02d", i), Partitions: engine.MaxPartitions}); err != nil {
			t.Fatal(err)
		}
	}
	items, next, size := getPage(t, g, "/v1/topics?limit=1000", "topics")
	built := pc.built.Load()
	t.Logf("a page of %d topics, %d bytes; %d topics built", len(items), size, built)
	if size > router.MaxPageBytes || next == "" || len(items) >= topics {
		t.Fatalf("page of %d topics, %d bytes, next_cursor %q: want under %d bytes with a cursor", len(items), size, next, router.MaxPageBytes)
	}
	if slack := int64(len(items)/4 + 8); built > int64(len(items))+slack {
		t.Errorf("built %d topics for a page of %d, want at most %d more", built, len(items), slack)
	}
	if names := pageAll(t, g, "/v1/topics?limit=1000", "topics", "name", topics); len(names) != topics {
		t.Fatalf("paged through %d topics, want %d", len(names), topics)
	}
}
