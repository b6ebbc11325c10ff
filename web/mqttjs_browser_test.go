package web_test

// mqtt.js in chromium: the browser bundle of the npm package (its
// dist/mqtt.esm.js, installed from testdata/mqttjs by npm ci) served by the
// test beside the gateway, so the page and GET /mqtt share an origin, as a
// page served by the gateway would.

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// mqttjsPage runs in chromium: mqtt.js connects to the page's own gateway
// at /mqtt with MQTT 5 and with 3.1.1, subscribes with wildcards at QoS
// 0, 1 and 2, publishes at each QoS, gets a native HTTP publish as its
// JSON text and a retained message with the retain flag. It sets
// window.mqttResult to "ok" or to what went wrong.
const mqttjsPage = `<!doctype html>
<meta charset="utf-8">
<title>mqtt.js against Switchyard</title>
<script type="module">
import bundle from "/mqttjs/mqtt.esm.js";
const mqtt = bundle.connectAsync ? bundle : bundle.default;
const WAIT_MS = 10000;
const url = "ws://" + location.host + "/mqtt";
const prefix = "browser" + Date.now().toString(36);
const within = (p, what) => Promise.race([p, new Promise((_, reject) =>
  setTimeout(() => reject(new Error("timed out waiting for " + what)), WAIT_MS))]);
function inbox(client) {
  const got = [];
  let wake = () => {};
  client.on("message", (topic, payload, packet) => {
    got.push({ topic, text: new TextDecoder().decode(payload), qos: packet.qos, retain: packet.retain });
    wake();
  });
  return (n, what) => within(new Promise((resolve) => {
    wake = () => { if (got.length >= n) resolve(got.slice(0, n)); };
    wake();
  }), n + " message(s): " + what + " (have " + JSON.stringify(got) + ")");
}
function check(cond, what) { if (!cond) throw new Error(what); }
async function run(version) {
  const t = prefix + "/v" + version;
  const opts = { protocolVersion: version, reconnectPeriod: 0, connectTimeout: WAIT_MS };
  const sub = await within(mqtt.connectAsync(url, { ...opts, clientId: t.replaceAll("/", "-") + "-sub" }), "CONNACK");
  const next = inbox(sub);
  const granted = await within(sub.subscribeAsync({
    [t + "/q0/+/temp"]: { qos: 0 }, [t + "/q1/+/temp"]: { qos: 1 }, [t + "/q2/#"]: { qos: 2 },
  }), "SUBACK");
  check(JSON.stringify(granted.map((g) => g.qos)) === "[0,1,2]", "granted " + JSON.stringify(granted));
  const pub = await within(mqtt.connectAsync(url, { ...opts, clientId: t.replaceAll("/", "-") + "-pub" }), "CONNACK");
  for (const qos of [0, 1, 2]) {
    await within(pub.publishAsync(t + "/q" + qos + "/room1/temp", String(qos), { qos }), "QoS " + qos + " publish");
  }
  // A native publish arrives as its JSON text.
  const res = await fetch("/v1/publish", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ topic: t.replaceAll("/", ".") + ".q2.native", data: { from: "http" } }) });
  check(res.ok, "POST /v1/publish: " + res.status);
  const got = await next(4, "the publishes");
  const by = Object.fromEntries(got.map((m) => [m.topic, m]));
  for (const qos of [0, 1, 2]) {
    const m = by[t + "/q" + qos + "/room1/temp"];
    check(m && m.text === String(qos) && m.qos === qos, "QoS " + qos + ": " + JSON.stringify(got));
  }
  const n = by[t + "/q2/native"];
  check(n && JSON.stringify(JSON.parse(n.text)) === '{"from":"http"}', "native publish: " + JSON.stringify(got));
  // Retained: a later subscriber gets it, flagged.
  await within(pub.publishAsync(t + "/status", "up", { qos: 1, retain: true }), "retained publish");
  const late = await within(mqtt.connectAsync(url, { ...opts, clientId: t.replaceAll("/", "-") + "-late" }), "CONNACK");
  const lateNext = inbox(late);
  await within(late.subscribeAsync(t + "/status", { qos: 1 }), "SUBACK");
  const [r] = await lateNext(1, "the retained message");
  check(r.text === "up" && r.retain === true, "retained: " + JSON.stringify(r));
  await Promise.all([sub.endAsync(), pub.endAsync(), late.endAsync()]);
}
try {
  await run(5);
  await run(4);
  window.mqttResult = "ok";
} catch (e) {
  window.mqttResult = String(e && e.stack || e);
}
</script>
`

// TestBrowserMQTTJS loads mqtt.js's browser bundle in chromium and runs
// mqttjsPage against the gateway's GET /mqtt. Skipped without chromium
// (unless SWITCHYARD_REQUIRE_BROWSER is set) or without npm (unless
// SWITCHYARD_REQUIRE_NPM is set).
func TestBrowserMQTTJS(t *testing.T) {
	dir := installMQTTJS(t)
	ctx := browser(t)
	bundle := filepath.Join(dir, "node_modules", "mqtt", "dist", "mqtt.esm.js")
	srv := newMQTTGateway(t, map[string]http.Handler{
		"/mqttjs/mqtt.esm.js": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
			http.ServeFile(w, r, bundle)
		}),
		"/mqttjs/": http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte(mqttjsPage))
		}),
	})
	navigate(t, ctx, srv.URL+"/mqttjs/")
	evalUntil(t, ctx, `typeof window.mqttResult === "string"`, "the page's mqtt.js run")
	got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`window.mqttResult`))
	if err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(got) != "ok" {
		t.Fatalf("mqtt.js in chromium: %s", got)
	}
}
