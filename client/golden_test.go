package client

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/internal/wire/golden"
)

// render writes v as JSON the way the gateway does: no HTML escaping,
// fields in the order of v's struct.
func render(t *testing.T, v any) string {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

// TestGoldenFrames decodes every server frame of the golden transcripts
// (internal/wire/testdata) as the client does, refusing fields the client
// does not know, and checks that what the client makes of a message,
// gap, published or error frame holds every field of it: written back in
// the protocol's shape it is the frame again, byte for byte. Lean frames
// are left out (the client does not ask for the lean envelope).
func TestGoldenFrames(t *testing.T) {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range all {
		for _, st := range tr.Received() {
			if tr.Query[st.Session] != "" {
				continue
			}
			dec := json.NewDecoder(bytes.NewReader([]byte(st.Frame)))
			dec.DisallowUnknownFields()
			var f inFrame
			if err := dec.Decode(&f); err != nil {
				t.Errorf("%s:%d: the client cannot decode %s: %v", tr.Path, st.Line, st.Frame, err)
				continue
			}
			got, ok := frameBack(t, &f)
			if !ok {
				continue
			}
			n++
			if got != st.Frame {
				t.Errorf("%s:%d: the client read\n\t%s\nas\n\t%s", tr.Path, st.Line, st.Frame, got)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d frames checked", n)
	}
}

// frameBack writes what the client made of f back as a frame.
func frameBack(t *testing.T, f *inFrame) (string, bool) {
	id := f.ID
	switch f.Op {
	case wire.OpMessage:
		m := f.message()
		var tm string
		if !m.Time.IsZero() {
			tm = m.Time.UTC().Format(wire.TimeFormat)
		}
		return render(t, struct {
			Op        string            `json:"op"`
			Pattern   string            `json:"pattern"`
			Topic     string            `json:"topic"`
			Partition int               `json:"partition"`
			Offset    int64             `json:"offset"`
			Key       string            `json:"key,omitempty"`
			Headers   map[string]string `json:"headers,omitempty"`
			Data      json.RawMessage   `json:"data"`
			Time      string            `json:"time"`
			Group     string            `json:"group,omitempty"`
			Attempt   int               `json:"attempt,omitempty"`
		}{f.Op, m.Pattern, m.Topic, m.Partition, m.Offset, m.Key, m.Headers, m.Data, tm, m.Group, m.Attempt}), true
	case wire.OpGap:
		g := f.gap()
		return render(t, struct {
			Op        string `json:"op"`
			Pattern   string `json:"pattern"`
			Group     string `json:"group,omitempty"`
			Topic     string `json:"topic"`
			Partition int    `json:"partition"`
			From      int64  `json:"from"`
			To        int64  `json:"to"`
			Reason    string `json:"reason"`
		}{f.Op, g.Pattern, g.Group, g.Topic, g.Partition, g.From, g.To, g.Reason}), true
	case wire.OpPublished:
		p := f.published()
		return render(t, struct {
			Op        string          `json:"op"`
			ID        json.RawMessage `json:"id,omitempty"`
			Topic     string          `json:"topic"`
			Partition int             `json:"partition"`
			Offset    int64           `json:"offset"`
			Duplicate bool            `json:"duplicate,omitempty"`
		}{f.Op, id, p.Topic, p.Partition, p.Offset, p.Duplicate}), true
	case wire.OpError:
		e := f.err()
		return render(t, struct {
			Op      string          `json:"op"`
			ID      json.RawMessage `json:"id,omitempty"`
			Code    string          `json:"code"`
			Message string          `json:"message"`
		}{f.Op, id, e.Code, e.Message}), true
	}
	return "", false
}
