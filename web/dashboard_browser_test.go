package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
	"github.com/switchyard/switchyard/router"
	"github.com/switchyard/switchyard/web"
)

// authGateway is a gateway serving the dashboard with an admin key, which
// records every request's URL so that a test can check that the key never
// appears in one.
type authGateway struct {
	srv  *httptest.Server
	eng  engine.Engine
	mu   sync.Mutex
	urls []string
}

func newAuthWebGateway(t *testing.T, stats time.Duration) *authGateway {
	t.Helper()
	eng := memengine.New(memengine.Options{})
	rt, err := router.New(router.Options{Engine: eng, Registry: prometheus.NewRegistry(), Static: web.FS(), StatsInterval: stats,
		Auth: router.AuthOptions{AdminKey: adminKey, HMACSecrets: [][]byte{hmacSecret}}})
	if err != nil {
		t.Fatal(err)
	}
	g := &authGateway{eng: eng}
	g.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.urls = append(g.urls, r.URL.String())
		g.mu.Unlock()
		rt.ServeHTTP(w, r)
	}))
	g.srv.Start()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		_ = rt.Shutdown(ctx)
		g.srv.Close()
		_ = eng.Close(ctx)
	})
	return g
}

// noKeyInURLs fails the test if a request URL other than the allowed ones
// (the test's own navigations) carried a credential.
func (g *authGateway) noKeyInURLs(t *testing.T, allowed ...string) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.urls) == 0 {
		t.Fatal("no request recorded")
	}
	for _, u := range g.urls {
		if slices.Contains(allowed, u) {
			continue
		}
		if strings.Contains(u, adminKey) || strings.Contains(u, "token=") || strings.Contains(u, "admin_key=") {
			t.Errorf("a request URL carries the credential: %s", u)
		}
	}
}

// run runs JavaScript in the page, failing the test on an error.
func run(t *testing.T, ctx context.Context, js string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](js)); err != nil {
		t.Fatalf("%s: %v", js, err)
	}
}

// signIn types cred into the sign-in form and submits it.
func signIn(t *testing.T, ctx context.Context, cred string) {
	t.Helper()
	run(t, ctx, fmt.Sprintf(`document.getElementById("signin-key").value = %q;
		document.getElementById("signin-submit").click()`, cred))
}

// signInRequired waits for the sign-in form and checks that no list claims
// to be empty meanwhile.
func signInRequired(t *testing.T, ctx context.Context) {
	t.Helper()
	evalUntil(t, ctx, `document.body.dataset.auth === "required" && !document.getElementById("signin").hidden &&
		document.getElementById("conn-state").dataset.state === "unauthorized"`, "the sign-in form")
	evalUntil(t, ctx, `["topics-empty", "groups-empty", "deadletters-empty", "sessions-empty", "top-topics-empty"].every(
			(id) => getComputedStyle(document.getElementById(id)).display === "none") &&
		getComputedStyle(document.querySelector("#topics").closest("section").querySelector(".locked-note")).display === "block"`,
		"unauthorized notes instead of empty lists")
}

// TestBrowserDashboardSignIn: with an admin key configured the dashboard
// asks for it, then shows the gateway, its topics ($sys last) and live
// rates; the key stays in sessionStorage and headers, never in a URL; sign
// out forgets it.
func TestBrowserDashboardSignIn(t *testing.T) {
	ctx := browser(t)
	g := newAuthWebGateway(t, 100*time.Millisecond)
	if _, err := g.eng.CreateTopic(context.Background(), engine.TopicConfig{Name: "zeta.orders"}); err != nil {
		t.Fatal(err)
	}
	// An old link with the key in its address: the key is dropped unused.
	navigate(t, ctx, g.srv.URL+"/?admin_key=old-link-credential")
	signInRequired(t, ctx)
	evalUntil(t, ctx, `!location.search.includes("admin_key")`, "the key removed from the address")

	signIn(t, ctx, adminKey)
	evalUntil(t, ctx, `document.body.dataset.auth === "signed-in" && document.getElementById("conn-state").dataset.state === "open"`, "signed in and connected")
	evalUntil(t, ctx, fmt.Sprintf(`document.getElementById("info-epoch").textContent === %q &&
		document.getElementById("info-engine").textContent === "memengine" &&
		document.getElementById("info-node").textContent !== "–" && document.getElementById("info-version").textContent !== "–"`,
		g.eng.Epoch()), "version, engine, epoch and node")
	evalUntil(t, ctx, `(() => {
		const names = Array.from(document.querySelectorAll("#topics tbody tr td:first-child"), (td) => td.textContent);
		const sys = names.findIndex((n) => n.startsWith("$"));
		return names.includes("zeta.orders") && sys > names.indexOf("zeta.orders") && names.slice(sys).every((n) => n.startsWith("$"));
	})()`, "the topics, $sys last")
	evalUntil(t, ctx, `Number(document.getElementById("chart-publishes").dataset.points) > 0`, "live statistics")
	evalUntil(t, ctx, fmt.Sprintf(`sessionStorage.getItem("switchyard.credential") === %q && !location.href.includes(%q)`, adminKey, adminKey), "the key in sessionStorage only")

	// The try-it panel publishes with the key in a header.
	run(t, ctx, `document.getElementById("try-topic").value = "zeta.orders"; document.getElementById("try-publish").click()`)
	evalUntil(t, ctx, `document.getElementById("try-result").textContent.startsWith("Published to zeta.orders")`, "a publish")

	run(t, ctx, `document.getElementById("signout").click()`)
	signInRequired(t, ctx)
	evalUntil(t, ctx, `sessionStorage.getItem("switchyard.credential") === null && document.querySelectorAll("#topics tbody tr").length === 0`, "the key and the data forgotten")
	g.noKeyInURLs(t, "/?admin_key=old-link-credential")
}

// TestBrowserDashboardWrongKey: a wrong key is refused with a message and
// not stored; a saved key the gateway no longer accepts brings the form back.
func TestBrowserDashboardWrongKey(t *testing.T) {
	ctx := browser(t)
	g := newAuthWebGateway(t, -1)
	navigate(t, ctx, g.srv.URL+"/")
	signInRequired(t, ctx)
	signIn(t, ctx, "not-the-admin-key-at-all")
	evalUntil(t, ctx, `document.getElementById("signin-status").textContent.startsWith("Wrong key or token") &&
		document.getElementById("signin-status").classList.contains("error")`, "the refusal shown")
	evalUntil(t, ctx, `document.body.dataset.auth === "required" && sessionStorage.getItem("switchyard.credential") === null`, "nothing stored")

	// A stale key in storage (a rotated admin key): the form comes back with a reason.
	run(t, ctx, `sessionStorage.setItem("switchyard.credential", "a-rotated-admin-key-0123"); location.reload()`)
	evalUntil(t, ctx, `document.readyState === "complete" && document.body.dataset.auth === "required" &&
		document.getElementById("signin-status").textContent.includes("refused the saved credential")`, "the stale key refused")
	g.noKeyInURLs(t)
}

// TestBrowserDashboardSessions: the sessions view lists a WebSocket
// client (address, user, subscriptions, node) and the dashboard's own
// stream, and its End button ends the client's session (4001).
func TestBrowserDashboardSessions(t *testing.T) {
	ctx := browser(t)
	g := newAuthWebGateway(t, 100*time.Millisecond)
	dctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(g.srv.URL, "http")+"/v1/ws",
		&websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {"Bearer " + userToken(t, "carol", "rooms.#")}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(dctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"rooms.#"}`)); err != nil {
		t.Fatal(err)
	}
	// The welcome, then the reply; the gateway may write both in one
	// message (its frames are batched, one per line).
	var id string
	for subscribed := false; id == "" || !subscribed; {
		_, data, err := ws.Read(dctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"welcome"`) {
			id = strings.Split(strings.Split(string(data), `"session":"`)[1], `"`)[0]
		}
		subscribed = subscribed || strings.Contains(string(data), `"subscribed"`)
	}
	navigate(t, ctx, g.srv.URL+"/")
	signInRequired(t, ctx)
	signIn(t, ctx, adminKey)
	host, _ := os.Hostname()
	evalUntil(t, ctx, fmt.Sprintf(`(() => {
		const row = document.querySelector('#sessions tbody tr[data-id=%q]');
		if (!row) return false;
		const c = Array.from(row.cells, (td) => td.textContent);
		return c[1] === "ws" && c[2] === "127.0.0.1" && c[3] === "carol" && c[4] === "1" && c[5] === "0" && c[6] === "0" && c[8] === %q;
	})()`, id, host), "the WebSocket client listed")
	evalUntil(t, ctx, `Array.from(document.querySelectorAll("#sessions tbody tr"), (tr) => tr.cells[1].textContent + " " + tr.cells[3].textContent).includes("sse admin")`,
		"the dashboard's own stream listed")
	// Its End button closes it with 4001 and the row goes.
	evalUntil(t, ctx, fmt.Sprintf(`(() => {
		window.confirm = () => true;
		const b = document.querySelector('#sessions tbody tr[data-id=%q] button.end-session');
		if (b) b.click();
		return !!b;
	})()`, id), "the End button clicked")
	for {
		if _, _, err := ws.Read(dctx); err != nil {
			if websocket.CloseStatus(err) != 4001 {
				t.Fatalf("the ended session: %v, want close 4001", err)
			}
			break
		}
	}
	evalUntil(t, ctx, fmt.Sprintf(`!document.querySelector('#sessions tbody tr[data-id=%q]')`, id), "the closed session gone")
}

// TestBrowserDashboardHistoryOnLoad: the charts start with the statistics
// the gateway kept from before the page was opened.
func TestBrowserDashboardHistoryOnLoad(t *testing.T) {
	ctx := browser(t)
	srv, _, eng := newWebGateway(t, 20*time.Millisecond)
	// Wait for 50 records of $sys.stats (a second of them) before opening the page.
	deadline := time.Now().Add(waitTimeout)
	for {
		ti, err := eng.Topic(context.Background(), "$sys.stats")
		if err == nil && len(ti.Parts) > 0 && ti.Parts[0].Next >= 50 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no 50 records of $sys.stats: %v %v", ti, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	opened := time.Now()
	navigate(t, ctx, srv.URL+"/")
	// Records from before the page opened are replayed, not only live ones.
	evalUntil(t, ctx, fmt.Sprintf(`(() => {
		const d = document.getElementById("chart-publishes").dataset;
		return Number(d.points) >= 50 && Number(d.first) < %d;
	})()`, opened.Add(-500*time.Millisecond).UnixMilli()), "the last minutes drawn at once")
}

// TestBrowserDashboardTokenNotAdmin: a token signs in and sees what its
// grants allow; the admin-only sessions view says it needs the admin key,
// and is not asked again with every statistics record.
func TestBrowserDashboardTokenNotAdmin(t *testing.T) {
	ctx := browser(t)
	g := newAuthWebGateway(t, 50*time.Millisecond)
	navigate(t, ctx, g.srv.URL+"/")
	signInRequired(t, ctx)
	signIn(t, ctx, userToken(t, "dave", "$sys.#"))
	evalUntil(t, ctx, `document.body.dataset.auth === "signed-in" && document.getElementById("conn-state").dataset.state === "open"`, "signed in with a token")
	evalUntil(t, ctx, `document.getElementById("sessions-page").textContent.includes("admin key")`, "the sessions view asking for the admin key")
	evalUntil(t, ctx, `Number(document.getElementById("chart-publishes").dataset.points) >= 70`, "three seconds of statistics")
	g.mu.Lock()
	n := 0
	for _, u := range g.urls {
		if strings.HasPrefix(u, "/v1/sessions") {
			n++
		}
	}
	g.mu.Unlock()
	if n != 1 {
		t.Errorf("GET /v1/sessions asked %d times, want once", n)
	}
	g.noKeyInURLs(t)
}
