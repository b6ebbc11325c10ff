package jsengine

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// refPubAck decodes a publish's answer as nats.go's asynchronous
// publisher does (jetstream.(*jetStream).handleAsyncReply), with its own
// response type.
func refPubAck(data []byte) (*jetstream.PubAck, error) {
	var r struct {
		Type  string              `json:"type"`
		Error *jetstream.APIError `json:"error,omitempty"`
		*jetstream.PubAck
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return nil, r.Error
	}
	if r.PubAck == nil || r.PubAck.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return r.PubAck, nil
}

func checkPubAck(t testing.TB, data []byte) {
	t.Helper()
	want, werr := refPubAck(data)
	got, err := decodePubAck(data)
	if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(err, werr) {
		t.Fatalf("decodePubAck(%q) = %#v, %v; nats.go gives %#v, %v", data, got, err, want, werr)
	}
	// The inbox's decoding, with the stream of an earlier answer: the
	// same answer, whether the stream is this one or another.
	for _, known := range []string{"S", "other", ""} {
		got, err := decodePubAckIn(data, known)
		if !reflect.DeepEqual(got, want) || !reflect.DeepEqual(err, werr) {
			t.Fatalf("decodePubAckIn(%q, %q) = %#v, %v; nats.go gives %#v, %v", data, known, got, err, want, werr)
		}
	}
}

func TestDecodePubAckMatchesNATS(t *testing.T) {
	for _, s := range []string{
		`{"stream":"S","seq":1}`, `{"stream":"S","seq":0}`, `{"stream":"S","seq":18446744073709551615}`,
		`{"stream":"S","seq":18446744073709551616}`, `{"stream":"S","seq":01}`, `{"stream":"S","seq":-1}`, `{"stream":"S","seq":1.5}`,
		`{"stream":"S","seq":1,"duplicate":true}`, `{"stream":"S","seq":1,"duplicate":false}`, `{"stream":"S","seq":1,"domain":"hub"}`,
		`{"stream":"S","seq":1,"domain":"hub","duplicate":true}`, `{"stream":"S","seq":1,"val":"3"}`, `{"stream":"S","seq":1} `,
		`{"stream":"","seq":1}`, `{"seq":1}`, `{"stream":"S"}`, `{"stream":"a\"b","seq":1}`, `{"stream":"é","seq":1}`,
		"{\"stream\":\"\xff\",\"seq\":1}", `{"stream":"S","seq":1}x`, `{"stream":"S","seq":1,}`, `{"stream":"S","seq":"1"}`,
		`{"Stream":"S","seq":1}`, `{"stream":"S","Seq":2}`, `{"type":"x","stream":"S","seq":1}`,
		`{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"S","seq":0}`,
		`{"error":{"code":400,"err_code":10070,"description":"wrong last msg ID: a.1"}}`,
		`{"error":{"code":503,"description":"no"}}`, `{"error":null,"stream":"S","seq":3}`, `{"error":1}`,
		``, `{`, `null`, `[]`, `{"stream":"S","seq":1`, `{"stream":"S","seq":`, `{"stream":"S`,
	} {
		checkPubAck(t, []byte(s))
	}
	if _, ok := scanPubAck([]byte(`{"stream":"S","seq":42}`), ""); !ok {
		t.Fatal("a plain PubAck took the slow path")
	}
	if _, ok := scanPubAck([]byte(`{"stream":"S","seq":42,"duplicate":true}`), ""); !ok {
		t.Fatal("a plain duplicate PubAck took the slow path")
	}
}

func FuzzDecodePubAck(f *testing.F) {
	for _, s := range []string{`{"stream":"S","seq":1}`, `{"stream":"S","seq":1,"duplicate":true}`, `{"error":{"code":400,"err_code":10071,"description":"x"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkPubAck(t, data) })
}

func BenchmarkDecodePubAck(b *testing.B) {
	data := []byte(`{"stream":"SY_jscpu_rec","seq":1234567}`)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := decodePubAck(data); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := refPubAck(data); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// ackRig is an inbox on its own connection to a server with a stream
// of its own (memory storage).
type ackRig struct {
	nc     *nats.Conn
	in     *ackInbox
	stream string
}

func newAckRig(t *testing.T) *ackRig {
	t.Helper()
	nc, err := nats.Connect(natstest.URL(t), nats.MaxReconnects(-1), nats.ReconnectWait(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	name := "ACKS" + strconv.FormatInt(time.Now().UnixNano(), 36)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), name) })
	in, err := newAckInbox(nc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // exits when the inbox is closed
		defer close(done)
		in.watch()
	}()
	t.Cleanup(func() {
		in.close(errors.New("closed"))
		<-done
	})
	return &ackRig{nc: nc, in: in, stream: name}
}

// answer waits for f's answer.
func answer(t *testing.T, f *ackFuture) (*jetstream.PubAck, error) {
	t.Helper()
	select {
	case a := <-f.Ok():
		return a, nil
	case err := <-f.Err():
		return nil, err
	case <-time.After(15 * time.Second):
		t.Fatal("no answer")
		return nil, nil
	}
}

// TestAckInboxAnswers: stored, duplicate and refused records are answered
// as nats.go answers them, each on its own future, in publish order.
func TestAckInboxAnswers(t *testing.T) {
	r := newAckRig(t)
	stream := r.stream
	msg := func(id string, hdr ...string) *nats.Msg {
		m := nats.NewMsg(stream + ".x")
		m.Data = []byte(id)
		m.Header.Set(jetstream.MsgIDHeader, id)
		for i := 0; i+1 < len(hdr); i += 2 {
			m.Header.Set(hdr[i], hdr[i+1])
		}
		return m
	}
	var fs []*ackFuture
	for i := range 20 {
		f, err := r.in.publish(msg("m" + strconv.Itoa(i)))
		if err != nil {
			t.Fatal(err)
		}
		fs = append(fs, f)
	}
	for i, f := range fs {
		a, err := answer(t, f)
		if err != nil || a.Sequence != uint64(i+1) || a.Duplicate || a.Stream != stream {
			t.Fatalf("record %d: %+v, %v", i, a, err)
		}
	}
	f, _ := r.in.publish(msg("m3"))
	if a, err := answer(t, f); err != nil || !a.Duplicate || a.Sequence != 4 {
		t.Fatalf("duplicate: %+v, %v", a, err)
	}
	f, _ = r.in.publish(msg("m99", jetstream.ExpectedLastSeqHeader, "7"))
	_, err := answer(t, f)
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) || !isWrongLast(err) {
		t.Fatalf("refused record answered with %v, want a wrong-last-sequence APIError", err)
	}
	if n := r.in.len(); n != 0 {
		t.Fatalf("%d records still pending", n)
	}
}

// TestAckInboxNoResponders: a record no stream takes is answered with
// jetstream.ErrNoStreamResponse once nats.go's retries are spent.
func TestAckInboxNoResponders(t *testing.T) {
	r := newAckRig(t)
	f, err := r.in.publish(nats.NewMsg("nostream." + strconv.FormatInt(time.Now().UnixNano(), 36)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answer(t, f); !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Fatalf("answered with %v, want %v", err, jetstream.ErrNoStreamResponse)
	}
}

// TestAckInboxTimeoutAndReconnect: a record whose answer does not come is
// answered with jetstream.ErrAsyncPublishTimeout after the inbox's
// timeout, and with nats.ErrDisconnected when the connection starts
// reconnecting first; neither stays pending.
func TestAckInboxTimeoutAndReconnect(t *testing.T) {
	r := newAckRig(t)
	// A core subscriber that never answers holds the answer back.
	subj := "silent." + strconv.FormatInt(time.Now().UnixNano(), 36)
	sub, err := r.nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()

	r.in.mu.Lock()
	r.in.timeout = 50 * time.Millisecond
	r.in.mu.Unlock()
	f, err := r.in.publish(nats.NewMsg(subj))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answer(t, f); !errors.Is(err, jetstream.ErrAsyncPublishTimeout) {
		t.Fatalf("answered with %v, want %v", err, jetstream.ErrAsyncPublishTimeout)
	}

	r.in.mu.Lock()
	r.in.timeout = time.Minute
	r.in.mu.Unlock()
	f, err = r.in.publish(nats.NewMsg(subj))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	if _, err := answer(t, f); !errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("answered with %v, want %v", err, nats.ErrDisconnected)
	}
	if n := r.in.len(); n != 0 {
		t.Fatalf("%d records still pending", n)
	}
}

// TestAckInboxClose: closing answers what is pending and refuses new
// publishes.
func TestAckInboxClose(t *testing.T) {
	r := newAckRig(t)
	subj := "silent." + strconv.FormatInt(time.Now().UnixNano(), 36)
	sub, err := r.nc.SubscribeSync(subj)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	f, err := r.in.publish(nats.NewMsg(subj))
	if err != nil {
		t.Fatal(err)
	}
	closed := errors.New("closed here")
	r.in.close(closed)
	if _, err := answer(t, f); !errors.Is(err, closed) {
		t.Fatalf("answered with %v, want %v", err, closed)
	}
	if _, err := r.in.publish(nats.NewMsg(subj)); err == nil {
		t.Fatal("publish after close succeeded")
	}
}
