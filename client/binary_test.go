package client_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/engine"
)

// TestPublishBytes: PublishBytes stores bytes as they are; Publish of a
// []byte stores the JSON string of their base64 (the documented rule);
// readers get both back, over the WebSocket and the HTTP API.
func TestPublishBytes(t *testing.T) {
	g, err := startGateway(engine.GroupPolicy{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Close)
	c := dial(t, g, nil)
	ctx := testCtx(t)
	raw := []byte{0, 1, 2, 0xff}
	if _, err := c.PublishBytes(ctx, "bin.t", raw); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Publish(ctx, "bin.t", raw); err != nil { // JSON: "AAEC/w=="
		t.Fatal(err)
	}
	if _, err := c.PublishBytes(ctx, "bin.t", []byte(`{"n":1}`)); err != nil {
		t.Fatal(err)
	}
	sub, err := c.SubscribeChan(ctx, "bin.t", client.SubscribeOptions{From: client.Earliest()})
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		data, encoding string
		payload        []byte
	}{
		{`"AAEC/w=="`, "base64", raw},
		{`"AAEC/w=="`, "", []byte(`"AAEC/w=="`)},
		{`{"n":1}`, "", []byte(`{"n":1}`)},
	}
	for i, w := range want {
		m := recv(t, sub.C)
		p, err := m.Payload()
		if string(m.Data) != w.data || m.Encoding != w.encoding || err != nil || !bytes.Equal(p, w.payload) {
			t.Errorf("record %d: data %s encoding %q payload %q (%v); want %s %q %q", i, m.Data, m.Encoding, p, err, w.data, w.encoding, w.payload)
		}
	}
	resp, err := http.Get(g.HTTP + "/v1/topics/bin.t/messages?from=0")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var page struct {
		Messages []struct {
			Data     json.RawMessage `json:"data"`
			Encoding string          `json:"encoding"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(body, &page); err != nil || len(page.Messages) != 3 {
		t.Fatalf("HTTP read: %s (%v)", body, err)
	}
	if m := page.Messages[0]; string(m.Data) != `"AAEC/w=="` || m.Encoding != "base64" {
		t.Errorf("HTTP read of the bytes: %s", body)
	}
	if m := page.Messages[2]; string(m.Data) != `{"n":1}` || m.Encoding != "" {
		t.Errorf("HTTP read of JSON bytes: %s", body)
	}
}
