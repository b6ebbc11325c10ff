package jsengine_test

import (
	"context"
	"fmt"
	"io"
	"net"
	neturl "net/url"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// slowLink is a loopback TCP proxy whose server-to-client direction
// carries at most rate bytes a second (0: as fast as it comes): a link
// that is slow but alive, every byte arriving, none held; with
// freezeAfter set, that direction of each connection goes silent once it
// has carried that many bytes (the other direction still flows). Its
// cleanup closes its listener and connections and waits for its
// goroutines.
type slowLink struct {
	ln          net.Listener
	target      string
	rate        int
	freezeAfter int
	wg          sync.WaitGroup
	mu          sync.Mutex
	conns       []net.Conn
	closed      chan struct{}
}

func newSlowLink(t *testing.T, url string, rate int) *slowLink {
	t.Helper()
	return newFreezingLink(t, url, rate, 0)
}

func newFreezingLink(t *testing.T, url string, rate, freezeAfter int) *slowLink {
	t.Helper()
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &slowLink{ln: ln, target: u.Host, rate: rate, freezeAfter: freezeAfter, closed: make(chan struct{})}
	l.wg.Add(1)
	go l.accept() // ends when the listener closes
	t.Cleanup(l.close)
	return l
}

func (l *slowLink) URL() string { return "nats://" + l.ln.Addr().String() }

func (l *slowLink) track(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.closed:
		c.Close()
		return false
	default:
	}
	l.conns = append(l.conns, c)
	return true
}

func (l *slowLink) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", l.target)
		if err != nil {
			c.Close()
			continue
		}
		if !l.track(c) || !l.track(s) {
			c.Close()
			s.Close()
			continue
		}
		l.wg.Add(2)
		go func() { // ends when either side closes
			defer l.wg.Done()
			_, _ = io.Copy(s, c)
			c.Close()
			s.Close()
		}()
		go func() { // ends when either side closes
			defer l.wg.Done()
			l.paced(c, s)
			c.Close()
			s.Close()
		}()
	}
}

// paced copies src to dst at l.rate bytes a second, in chunks of 64,
// until l.freezeAfter bytes (when set), then holds the rest. The pace
// keeps to a schedule (a chunk late is made up by the next), so a loaded
// machine's late wake-ups do not slow the link down.
func (l *slowLink) paced(dst, src net.Conn) {
	const chunk = 64
	buf := make([]byte, chunk)
	var due time.Time // when the bytes sent so far are due at l.rate
	sent := 0
	for {
		want := chunk
		if l.freezeAfter > 0 {
			if sent >= l.freezeAfter {
				<-l.closed // silent from now on
				return
			}
			want = min(want, l.freezeAfter-sent)
		}
		n, err := src.Read(buf[:want])
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
			sent += n
		}
		if err != nil {
			return
		}
		if l.rate > 0 {
			perChunk := time.Second * chunk / time.Duration(l.rate)
			if now := time.Now(); due.Before(now.Add(-perChunk)) {
				due = now // idle: no credit kept past one chunk
			}
			due = due.Add(time.Second * time.Duration(n) / time.Duration(l.rate))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-l.closed:
					t.Stop()
					return
				}
			}
		}
	}
}

func (l *slowLink) close() {
	l.mu.Lock()
	close(l.closed)
	for _, c := range l.conns {
		c.Close()
	}
	l.mu.Unlock()
	l.ln.Close()
	l.wg.Wait()
}

// openBucket connects to url and binds bucket; the test's cleanup closes
// the connection.
func openBucket(t *testing.T, url, bucket string) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestListingOverSlowLinkWithDeletes: a bucket's listing is not cut
// while the server keeps delivering, deleted keys included (they were
// skipped by the watcher, IgnoreDeletes, and did not count as the listing
// moving). A bucket holding one key and
// then 400 keys deleted since (as a group bucket holds the positions a
// group's or topic's delete purged, or the live bucket the members that
// left), listed over a link that is slow but alive (8 KB/s, a deleted
// key every few tens of milliseconds), is listed whole, as nats.go's own
// lister over the same link lists it. The bound is
// documented as cutting a listing "that stops coming", never one "that
// keeps coming".
func TestListingOverSlowLinkWithDeletes(t *testing.T) {
	url := natstest.URL(t)
	bucket := natstest.Prefix(t, url) + "_tombs"
	ctx, kv := listingBucket(t, url, bucket)
	if _, err := kv.Put(ctx, "live", []byte("1")); err != nil {
		t.Fatal(err)
	}
	const deleted = 400
	for i := range deleted {
		if err := kv.Delete(ctx, fmt.Sprintf("gone.%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	slow := newSlowLink(t, url, 8<<10)
	bounded := jsengine.BoundKV(t, openBucket(t, slow.URL(), bucket))
	raw := openBucket(t, slow.URL(), bucket)

	var wg sync.WaitGroup
	var rawKeys []string
	var rawErr error
	var rawTook time.Duration
	wg.Add(1)
	go func() { // ends with the listing, at most at ctx's deadline
		defer wg.Done()
		start := time.Now()
		l, err := raw.ListKeys(ctx)
		if err != nil {
			rawErr = err
			return
		}
		for k := range l.Keys() {
			rawKeys = append(rawKeys, k)
		}
		rawTook = time.Since(start)
	}()
	start := time.Now()
	l, err := bounded.ListKeys(ctx)
	took := time.Since(start)
	var keys []string
	if err == nil {
		for k := range l.Keys() {
			keys = append(keys, k)
		}
	}
	wg.Wait()
	t.Logf("nats.go's lister over the slow link: %v, err %v, after %v", rawKeys, rawErr, rawTook)
	t.Logf("bounded lister over the slow link: %v, err %v, after %v", keys, err, took)
	if rawErr != nil || len(rawKeys) != 1 {
		t.Fatalf("nats.go's lister over the slow link: %v, %v; want [live]", rawKeys, rawErr)
	}
	if err != nil || len(keys) != 1 || keys[0] != "live" {
		t.Errorf("bounded listing of a bucket with %d deleted keys over a slow but alive link: keys %v, err %v after %v; want [live] (nats.go's own lister got %v after %v)",
			deleted, keys, err, took, rawKeys, rawTook)
	}
}

// listingBucket makes a memory bucket named name on url for a listing
// test, with a context of a minute; the bucket is deleted when the test
// ends.
func listingBucket(t *testing.T, url, name string) (context.Context, jetstream.KeyValue) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, Storage: jetstream.MemoryStorage})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
	return ctx, kv
}
