package jsengine_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/jsengine"
	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestAppendIsBoundedOverASlowLink: an append answers within the engine's
// bound on one append (jsengine.AppendMax) however many round trips it
// needs, each answered late but within the bound on one round trip (a
// link that is slow rather than silent, or a server busy electing a
// leader): plain, with a MsgID, pipelined, and pipelined with a MsgID.
// Past the bound it fails with engine.ErrUnavailable. Each append here
// meets another node's record in its partition (its publish is refused,
// it reloads the partition and publishes again: three round trips, more
// with a MsgID), over a link that holds every request 3 s. A retry of
// the MsgID once the link is back stores it once.
func TestAppendIsBoundedOverASlowLink(t *testing.T) {
	url := natstest.URL(t)
	prefix := natstest.Prefix(t, url)
	px := newLinkProxy(t, url)
	a := newNode(t, nodeOpts{url: px.URL(), prefix: prefix})
	b := newNode(t, nodeOpts{url: url, prefix: prefix})
	ctx := t.Context()
	type tc struct {
		name, msgID string
		async       bool
	}
	cases := []tc{{"plain", "", false}, {"msgid", "m", false}, {"async", "", true}, {"asyncmsgid", "am", true}}
	for _, c := range cases {
		topic := "slow." + c.name
		if _, err := a.CreateTopic(ctx, engine.TopicConfig{Name: topic, Partitions: 1}); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{"", "warm"} { // the partition known, the claim path taken once
			if _, err := a.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"warm"`), MsgID: id}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := b.Append(ctx, engine.Message{Topic: topic, Data: []byte(`"other"`)}); err != nil {
			t.Fatal(err)
		}
	}
	px.SetDelay(3 * time.Second)
	type result struct {
		name string
		took time.Duration
		err  error
	}
	results := make(chan result, len(cases))
	for _, c := range cases {
		go func() { // ends with its append, at most when actx does
			actx, cancel := context.WithTimeout(ctx, 60*time.Second)
			defer cancel()
			m := engine.Message{Topic: "slow." + c.name, Data: []byte(`"` + c.name + `"`), MsgID: c.msgID}
			start := time.Now()
			if !c.async {
				_, err := a.Append(actx, m)
				results <- result{c.name, time.Since(start), err}
				return
			}
			got := make(chan error, 1)
			a.AppendAsync(actx, m, func(_ engine.Appended, err error) { got <- err })
			err := <-got
			results <- result{c.name, time.Since(start), err}
		}()
	}
	for range cases {
		r := <-results
		what := fmt.Sprintf("%s append meeting another node's record over a slow link", r.name)
		t.Logf("%s: %v after %v", r.name, r.err, r.took)
		if !errors.Is(r.err, engine.ErrUnavailable) {
			t.Errorf("%s: %v after %v, want engine.ErrUnavailable", what, r.err, r.took)
		}
		if r.took > jsengine.AppendMax+1500*time.Millisecond {
			t.Errorf("%s: answered after %v, want within %v", what, r.took, jsengine.AppendMax)
		}
	}
	px.SetDelay(0)
	for _, c := range cases {
		topic := "slow." + c.name
		data := []byte(`"` + c.name + `"`)
		if _, err := a.Append(ctx, engine.Message{Topic: topic, Data: data, MsgID: c.msgID}); err != nil {
			t.Fatalf("%s: append once the link is back: %v", c.name, err)
		}
		if c.msgID == "" {
			continue
		}
		recs, _, err := a.Read(ctx, topic, 0, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, r := range recs {
			if string(r.Data) == string(data) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d records of MsgID %q after a retry, want 1", c.name, n, c.msgID)
		}
	}
}
