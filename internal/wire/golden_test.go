package wire_test

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/internal/wire"
	"github.com/switchyard/switchyard/internal/wire/golden"
)

// goldenFrame is the union of the server frames the encoders here build.
type goldenFrame struct {
	Op        string            `json:"op"`
	ID        json.RawMessage   `json:"id"`
	Pattern   *string           `json:"pattern"`
	Group     string            `json:"group"`
	Topic     string            `json:"topic"`
	Partition int               `json:"partition"`
	Offset    int64             `json:"offset"`
	Key       string            `json:"key"`
	Headers   map[string]string `json:"headers"`
	Data      json.RawMessage   `json:"data"`
	Encoding  *string           `json:"encoding"`
	Time      *string           `json:"time"`
	Attempt   int               `json:"attempt"`
	Duplicate bool              `json:"duplicate"`
	Delta     bool              `json:"delta"`
	From      int64             `json:"from"`
	To        int64             `json:"to"`
	Reason    string            `json:"reason"`
	Code      string            `json:"code"`
	Message   string            `json:"message"`
}

// encode rebuilds f with the encoder the gateway uses for its op, or
// reports false for frames built elsewhere (replies of EncodeReply).
func encode(t *testing.T, f *goldenFrame) ([]byte, bool) {
	switch f.Op {
	case wire.OpError:
		return wire.EncodeError(f.ID, f.Code, f.Message), true
	case wire.OpPublished:
		return wire.EncodePublished(f.ID, f.Topic, engine.Appended{Partition: f.Partition, Offset: f.Offset, Duplicate: f.Duplicate}), true
	case wire.OpGap:
		return wire.EncodeGap(nil, *f.Pattern, f.Group, f.Topic, f.Partition, f.From, f.To, f.Reason), true
	case wire.OpMessage:
		if f.Delta {
			return encodeDelta(t, f), true
		}
		data, pe := wire.DecodePayload(f.Data, f.Encoding)
		if pe != nil {
			t.Fatal(pe)
		}
		rec := &engine.Record{Topic: f.Topic, Partition: f.Partition, Offset: f.Offset, Key: f.Key, Headers: f.Headers, Data: data}
		if f.Encoding != nil {
			rec.Headers = wire.MarkBinary(f.Headers, data)
		}
		if f.Time != nil {
			tm, err := time.Parse(time.RFC3339Nano, *f.Time)
			if err != nil {
				t.Fatal(err)
			}
			rec.Time = tm
		}
		switch {
		case f.Group != "":
			return wire.EncodeGroupMessage(*f.Pattern, engine.Delivery{Record: rec, Group: f.Group, Attempt: f.Attempt}), true
		case f.Time == nil: // lean
			body, lean := wire.RecordBody(nil, rec)
			pattern := f.Topic
			if f.Pattern != nil {
				pattern = *f.Pattern
			}
			return wire.EncodeLeanMessage(pattern, f.Topic, body[:lean]), true
		}
		return wire.EncodeMessage(*f.Pattern, wire.AppendRecordBody(nil, rec)), true
	}
	return nil, false
}

// encodeDelta rebuilds a delta message frame: its "data" is the delta's
// text, or its base64 with "encoding":"base64".
func encodeDelta(t *testing.T, f *goldenFrame) []byte {
	var delta []byte
	if f.Encoding != nil {
		d, pe := wire.DecodePayload(f.Data, f.Encoding)
		if pe != nil {
			t.Fatal(pe)
		}
		delta = d
	} else {
		var text string
		if err := json.Unmarshal(f.Data, &text); err != nil {
			t.Fatalf("delta data %s is not a string: %v", f.Data, err)
		}
		delta = []byte(text)
	}
	rec := &engine.Record{Topic: f.Topic, Partition: f.Partition, Offset: f.Offset, Key: f.Key, Headers: f.Headers}
	tm, err := time.Parse(time.RFC3339Nano, *f.Time)
	if err != nil {
		t.Fatal(err)
	}
	rec.Time = tm
	body, _ := wire.RecordDeltaBody(nil, rec, delta)
	return wire.EncodeMessage(*f.Pattern, body)
}

// TestGoldenEncoders rebuilds every message, gap, published and error
// frame of the golden transcripts with the encoders here, byte for byte.
func TestGoldenEncoders(t *testing.T) {
	all, err := golden.Load()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tr := range all {
		for _, st := range tr.Received() {
			var f goldenFrame
			if err := json.Unmarshal([]byte(st.Frame), &f); err != nil {
				t.Fatalf("%s:%d: %v", tr.Path, st.Line, err)
			}
			got, ok := encode(t, &f)
			if !ok {
				continue
			}
			n++
			if string(got) != st.Frame {
				t.Errorf("%s:%d:\n\tencoded %s\n\twant    %s", tr.Path, st.Line, got, st.Frame)
			}
		}
	}
	if n < 50 {
		t.Fatalf("only %d frames rebuilt", n)
	}
}

// TestGoldenCodes: codes.txtar holds one error frame for every code, and
// only codes defined here.
func TestGoldenCodes(t *testing.T) {
	tr, err := golden.Parse(golden.Dir() + "/codes.txtar")
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, st := range tr.Frames {
		var f goldenFrame
		if err := json.Unmarshal([]byte(st.Frame), &f); err != nil || f.Op != wire.OpError {
			t.Fatalf("line %d: %s (%v)", st.Line, st.Frame, err)
		}
		codes = append(codes, f.Code)
	}
	if !slices.Equal(codes, wire.Codes) {
		t.Fatalf("codes.txtar has\n\t%v\nwire.Codes are\n\t%v", codes, wire.Codes)
	}
}
