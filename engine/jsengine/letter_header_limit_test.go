package jsengine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/enginetest"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestLetterWithinHeaderLimit: JetStream refuses a message whose headers
// exceed 64 KiB, whatever its max payload. A small record nacked on its
// last attempt with a 100 KiB reason, and one whose headers take most of
// the 64 KiB, must each still be dead-lettered (listed, with the record's
// data and headers) and not stay owed for ever.
func TestLetterWithinHeaderLimit(t *testing.T) {
	url := natstest.URL(t)
	o := nodeOpts{url: url, prefix: natstest.Prefix(t, url), c: enginetest.Config{Policy: engine.GroupPolicy{MaxAttempts: 1, AckTimeout: time.Hour}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	e := newNode(t, o)
	if _, err := e.CreateTopic(ctx, engine.TopicConfig{Name: "hdr", Partitions: 1}); err != nil {
		t.Fatal(err)
	}
	m := joinManual(t, ctx, e, "g", "hdr", "m")
	hv := strings.Repeat("v", 63<<10)
	for i, c := range []struct {
		headers map[string]string
		reason  string
	}{
		{map[string]string{"h": "v"}, strings.Repeat("r", 100<<10)},
		{map[string]string{"h": hv}, "no"},
	} {
		if _, err := e.Append(ctx, engine.Message{Topic: "hdr", Key: "k", Headers: c.headers, Data: []byte("d")}); err != nil {
			t.Fatalf("case %d: append: %v", i, err)
		}
		d := m.next(t, 20*time.Second)
		if err := e.Nack(ctx, "g", "m", posOf(d.Record), c.reason); err != nil {
			t.Fatal(err)
		}
		var dls []engine.DeadLetter
		var err error
		waitUntilFor(t, "the letter", 10*time.Second, func() bool {
			dls, err = e.DeadLetters(ctx, engine.DeadLetterFilter{Group: "g"})
			return err == nil && len(dls) == i+1
		})
		dl := dls[i]
		if dl.Record.Offset != d.Record.Offset || string(dl.Record.Data) != "d" || dl.Record.Headers["h"] != c.headers["h"] || !strings.HasPrefix(c.reason, dl.Error) || dl.Error == "" {
			t.Fatalf("case %d: letter of offset %d, %d bytes of data, header of %d bytes, error of %d bytes; want offset %d, the record's data and header, the reason's start",
				i, dl.Record.Offset, len(dl.Record.Data), len(dl.Record.Headers["h"]), len(dl.Error), d.Record.Offset)
		}
	}
}
