package jsengine_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestLetterOfLargestRecord: a record as large as the log accepts, nacked
// on its last attempt with a long reason, so that not even the letter's
// plain encoding fits NATS's max payload: the letter is stored without the
// data, marked so, lists the record's data read from the log, and a
// redrive hands the record back to its group. A letter stored by an
// earlier version (all JSON) is still listed.
func TestLetterOfLargestRecord(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{MaxAttempts: 1, AckTimeout: time.Hour}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newNode(t, o)
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "big", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m := joinManual(t, ctx, e, "g", "big", "m")
	// The largest record the log takes, to within 64 bytes.
	var data []byte
	for n := int(nc.MaxPayload()); n > 0; n -= 64 {
		data = bytes.Repeat([]byte{'x'}, n)
		if _, err := e.Append(ctx, engine.Message{Topic: "big", Key: "k", Data: data}); err == nil {
			break
		}
	}
	t.Logf("max payload %d, record of %d bytes", nc.MaxPayload(), len(data))
	d := m.next(t, 20*time.Second)
	if !bytes.Equal(d.Record.Data, data) {
		t.Fatalf("delivered %d bytes, want the record's %d", len(d.Record.Data), len(data))
	}
	if err := e.Nack(ctx, "g", "m", posOf(d.Record), strings.Repeat("reason ", 100)); err != nil {
		t.Fatal(err)
	}
	var dls []engine.DeadLetter
	waitUntil(t, "the letter", func() bool {
		dls, err = e.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
		return err == nil && len(dls) == 1
	})
	if dl := dls[0]; dl.Record.Offset != d.Record.Offset || !bytes.Equal(dl.Record.Data, data) || dl.Record.Key != "k" {
		t.Fatalf("letter of offset %d key %q with %d bytes, want offset %d key k with the record's %d bytes",
			dl.Record.Offset, dl.Record.Key, len(dl.Record.Data), d.Record.Offset, len(data))
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	st, err := js.Stream(ctx, o.prefix+"_dl")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, o.prefix+".dl.>")
	if err != nil {
		t.Fatal(err)
	}
	if raw.Header.Get("Sy-Letter-Data") != "log" || len(raw.Data) != 0 {
		t.Fatalf("stored letter: %d bytes of data, Sy-Letter-Data %q; want it stored without the data, marked log",
			len(raw.Data), raw.Header.Get("Sy-Letter-Data"))
	}

	// An earlier version's letter: one JSON body.
	if _, err := js.Publish(ctx, o.prefix+".dl.qf",
		[]byte(`{"ID":"old","Reason":"queue_full","Subscriber":"s","Record":{"Topic":"big","Data":"b2xk"}}`)); err != nil {
		t.Fatal(err)
	}
	old, err := e.DeadLetters(ctx, engine.DeadLetterFilter{Reason: engine.ReasonQueueFull})
	if err != nil || len(old) != 1 || old[0].ID != "old" || string(old[0].Record.Data) != "old" {
		t.Fatalf("earlier version's letter listed as %+v (%v)", old, err)
	}

	if n, err := e.Redrive(ctx, engine.RedriveRequest{Group: "g"}); n != 1 || err != nil {
		t.Fatalf("Redrive = %d, %v; want 1", n, err)
	}
	d2 := m.next(t, 20*time.Second)
	if d2.Record.Offset != d.Record.Offset || d2.Attempt != 1 || !bytes.Equal(d2.Record.Data, data) {
		t.Fatalf("redriven: offset %d attempt %d with %d bytes, want offset %d attempt 1 with the record",
			d2.Record.Offset, d2.Attempt, len(d2.Record.Data), d.Record.Offset)
	}
	// A reason as large as the max payload: the letter keeps its start.
	if err := e.Nack(ctx, "g", "m", posOf(d2.Record), strings.Repeat("r", int(nc.MaxPayload()))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the letter with a long reason", func() bool {
		dls, err = e.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
		return err == nil && len(dls) == 1
	})
	if dl := dls[0]; len(dl.Error) != 1024 || !bytes.Equal(dl.Record.Data, data) {
		t.Fatalf("letter with a reason of %d bytes and %d bytes of data, want 1024 and the record's %d", len(dl.Error), len(dl.Record.Data), len(data))
	}
}
