package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"testing"

	"github.com/switchyard/switchyard/engine"
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
			Encoding  string            `json:"encoding,omitempty"`
			Delta     bool              `json:"delta,omitempty"`
			Time      string            `json:"time"`
			Group     string            `json:"group,omitempty"`
			Attempt   int               `json:"attempt,omitempty"`
		}{f.Op, m.Pattern, m.Topic, m.Partition, m.Offset, m.Key, m.Headers, m.Data, m.Encoding, f.Delta, tm, m.Group, m.Attempt}), true
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

// TestGoldenRequests builds every client frame of the golden transcripts
// that the client can make (publish, subscribe, unsubscribe, ack and nack
// with a numeric id) with the client's own request types, and checks that
// it is the frame the gateway was sent, as JSON values: the gateway's
// replies in the transcripts then answer what the client sends.
func TestGoldenRequests(t *testing.T) {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range all {
		for _, st := range tr.Steps {
			if !st.Send {
				continue
			}
			req, pe := wire.Decode([]byte(st.Frame))
			if pe != nil {
				continue
			}
			built, ok := clientRequest(t, req)
			if !ok {
				continue
			}
			n++
			b, err := json.Marshal(built)
			if err != nil {
				t.Fatal(err)
			}
			var got, want any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if err := json.Unmarshal([]byte(st.Frame), &want); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s:%d: the client builds\n\t%s\nfor\n\t%s", tr.Path, st.Line, b, st.Frame)
			}
		}
	}
	if n < 30 {
		t.Fatalf("only %d requests built", n)
	}
}

// clientRequest builds req with the client's request types, or reports
// false when the client never sends such a frame.
func clientRequest(t *testing.T, req *wire.Request) (any, bool) {
	var id uint64
	if len(req.ID) > 0 {
		n, err := strconv.ParseUint(string(req.ID), 10, 64)
		if err != nil || n == 0 {
			return nil, false // the client numbers its requests from 1
		}
		id = n
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	switch req.Op {
	case wire.OpPublish:
		if id == 0 || req.Topic == nil || len(req.Data) == 0 {
			return nil, false
		}
		r := publishReq{Op: req.Op, ID: id, Topic: *req.Topic, Data: req.Data, Key: str(req.Key),
			Headers: req.Headers, MsgID: str(req.MsgID), Priority: req.Priority}
		if req.Encoding != nil {
			payload, pe := wire.DecodePayload(req.Data, req.Encoding)
			if pe != nil {
				return nil, false // PublishBytes sends only valid base64
			}
			b := bytesPublish(*req.Topic, payload)
			r.Data, r.Encoding = b.Data, b.Encoding
		}
		return r, true
	case wire.OpSubscribe:
		if id == 0 || req.Pattern == nil || req.MaxInFlight != nil {
			return nil, false
		}
		r := subscribeReq{Op: req.Op, ID: id, Pattern: *req.Pattern, Group: str(req.Group), OnFull: OnFull(str(req.OnFull))}
		if req.Delta != nil {
			// Options.Delta asks for "fossil", on plain subscriptions only.
			if *req.Delta != wire.DeltaFossil || r.Group != "" {
				return nil, false
			}
			r.Delta = wire.DeltaFossil
		}
		if req.Presence != nil {
			r.Presence = *req.Presence
		}
		if req.Filter != nil {
			r.Filter = &filterSpec{Headers: req.Filter.Headers}
		}
		if len(req.From) > 0 {
			f, ok := clientFrom(t, req.From)
			if !ok {
				return nil, false
			}
			r.From = &f
		}
		return r, true
	case wire.OpUnsubscribe:
		if id == 0 || req.Pattern == nil {
			return nil, false
		}
		return unsubscribeReq{Op: req.Op, ID: id, Pattern: *req.Pattern, Group: str(req.Group)}, true
	case wire.OpAck, wire.OpNack:
		if req.Group == nil || req.Topic == nil || req.Partition == nil || req.Offset == nil || req.Offsets != nil {
			return nil, false
		}
		return ackReq{Op: req.Op, ID: id, Group: *req.Group, Topic: *req.Topic, Partition: *req.Partition,
			Offset: *req.Offset, Error: str(req.Error)}, true
	}
	return nil, false
}

// clientFrom is the client's From for a "from" the gateway accepts.
func clientFrom(t *testing.T, raw json.RawMessage) (From, bool) {
	f, pe := wire.ParseFrom(raw)
	if pe != nil {
		return From{}, false
	}
	switch {
	case string(raw) == `"last"`:
		return Last(), true
	case f.Last > 0:
		return Last(f.Last), true
	case f.Positions:
		var pos []Position
		for _, p := range f.Pos {
			pos = append(pos, Position{Topic: p.Topic, Partition: p.Partition, Offset: p.Offset})
		}
		return FromPositions(f.Epoch, pos...), true
	case f.Start.Kind == engine.StartLatest:
		return Latest(), true
	case f.Start.Kind == engine.StartEarliest:
		return Earliest(), true
	case f.Start.Kind == engine.StartTime:
		return FromTime(f.Start.Time), true
	}
	t.Fatalf("from %s: no client From", raw)
	return From{}, false
}
