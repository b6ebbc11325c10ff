package web_test

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/coder/websocket"
)

// TestBrowserDashboardPresence: the dashboard lists the sessions present on
// a topic, and drops one that leaves.
func TestBrowserDashboardPresence(t *testing.T) {
	ctx := browser(t)
	srv, _, _ := newWebGateway(t, -1)
	dctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	ws, _, err := websocket.Dial(dctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if err := ws.Write(dctx, websocket.MessageText, []byte(`{"op":"subscribe","id":1,"pattern":"rooms.42","presence":true}`)); err != nil {
		t.Fatal(err)
	}
	for { // welcome, then subscribed
		_, data, err := ws.Read(dctx)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(data), `"subscribed"`) {
			break
		}
	}
	navigate(t, ctx, srv.URL+"/")
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[any](`document.getElementById("presence-topic").value = "rooms.42";
		document.getElementById("presence-watch").click()`)); err != nil {
		t.Fatal(err)
	}
	evalUntil(t, ctx, `document.querySelectorAll("#presence tbody tr").length === 1 &&
		document.getElementById("presence-status").textContent.startsWith("1 present")`, "one member listed")
	ws.Close(websocket.StatusNormalClosure, "")
	evalUntil(t, ctx, `document.querySelectorAll("#presence tbody tr").length === 0 &&
		!document.getElementById("presence-empty").hidden`, "the member gone")
}
