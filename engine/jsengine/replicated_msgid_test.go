package jsengine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestReplicatedLastMsgIDRefusalStopsTheStream shows why AppendAsync does
// not chain pipelined records with Nats-Expected-Last-Msg-Id into a
// replicated stream (pipeline.go): a replicated stream checks that header
// only as it applies the record, after proposing it, and treats a
// mismatch there as a write error it cannot recover from. One refused
// publish stops the stream on every server: later publishes and reads get
// no answer. Were the server to refuse it before proposing (as it does the
// expected-sequence headers), this test would fail and replicated streams
// could pipeline as single servers do.
func TestReplicatedLastMsgIDRefusalStopsTheStream(t *testing.T) {
	c := natstest.NewCluster(t, 3)
	nc, err := nats.Connect(c.URLs(0))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "msgidr3", Subjects: []string{"msgidr3.>"}, Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	pub := func(h nats.Header) error {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: "msgidr3.a", Data: []byte("x"), Header: h})
		return err
	}
	if err := pub(nats.Header{jetstream.MsgIDHeader: {"first"}}); err != nil {
		t.Fatal(err)
	}
	err = pub(nats.Header{jetstream.MsgIDHeader: {"second"}, jetstream.ExpectedLastMsgIDHeader: {"not-the-last"}})
	if !isAPIError(err, 10070) {
		t.Fatalf("publish expecting a wrong last msg id: %v, want the refusal (10070)", err)
	}
	if err := pub(nil); err == nil {
		t.Fatal("the stream still stores records after a refused Nats-Expected-Last-Msg-Id: pipelining into replicated streams may chain on msg ids again")
	} else {
		t.Logf("a plain publish after the refusal: %v", err)
	}
}

func isAPIError(err error, code jetstream.ErrorCode) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == code
}
