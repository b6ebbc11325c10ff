package router_test

// A retained PUBLISH (or retained will) whose append fails after its
// message was stored in the retained store: the store is put back as it
// was (mqtt_retain.go).

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/engine"
	"github.com/switchyard/switchyard/engine/memengine"
)

// refusingAppends is the memory engine whose appends to topics under
// prefix fail unavailable while refuse is set, as a JetStream append does
// when NATS went away after the retained store answered.
type refusingAppends struct {
	*memengine.Engine
	prefix string
	refuse atomic.Bool
}

func (e *refusingAppends) refused(topic string) error {
	if e.refuse.Load() && strings.HasPrefix(topic, e.prefix) {
		return fmt.Errorf("append to %s refused by the test: %w", topic, engine.ErrUnavailable)
	}
	return nil
}

func (e *refusingAppends) Append(ctx context.Context, m engine.Message) (engine.Appended, error) {
	if err := e.refused(m.Topic); err != nil {
		return engine.Appended{}, err
	}
	return e.Engine.Append(ctx, m)
}

func (e *refusingAppends) AppendAsync(ctx context.Context, m engine.Message, done func(engine.Appended, error)) {
	if err := e.refused(m.Topic); err != nil {
		done(engine.Appended{}, err)
		return
	}
	e.Engine.AppendAsync(ctx, m, done)
}

// retainedOf subscribes a new MQTT 5 client to filter and returns the
// payloads of the retained messages it gets, by topic; a live marker
// published on marker (which filter must match) ends the read.
func retainedOf(t *testing.T, g *gateway, id, filter, marker string) map[string]string {
	t.Helper()
	sub, err := dialMQTT(t, g, 5, "tcp", id, "")
	if err != nil {
		t.Fatal(err)
	}
	sub.subscribe(t, filter, 1)
	pub, err := dialMQTT(t, g, 5, "tcp", id+"-marker", "")
	if err != nil {
		t.Fatal(err)
	}
	pub.publish(t, marker, 1, "marker")
	got := map[string]string{}
	for range 100 {
		m := sub.next(t)
		if m.topic == marker && !m.retain {
			return got
		}
		if !m.retain {
			t.Fatalf("%s got %s %q live, want only retained messages before the marker", id, m.topic, m.payload)
		}
		got[m.topic] = m.payload
	}
	t.Fatalf("%s: no marker after 100 messages", id)
	return nil
}

// TestMQTTRetainedUndoneWhenAppendFails: a retained PUBLISH whose append
// fails (PUBACK 0x80) after its message was stored leaves the retained
// store as it was: a new subscriber gets the topic's previous retained
// message, none on a topic that had none, and an empty payload whose
// append failed has not removed the previous one.
func TestMQTTRetainedUndoneWhenAppendFails(t *testing.T) {
	var eng *refusingAppends
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine {
			eng = &refusingAppends{Engine: e.(*memengine.Engine), prefix: "undo.f"}
			return eng
		}
	})
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "undo-pub", 30)
	id := uint16(0)
	publish := func(t *testing.T, topic, payload string, wantOK bool) {
		t.Helper()
		id++
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
			TopicName: topic, PacketID: id, Payload: []byte(payload)})
		ack := r.expect(t, packets.Puback)
		if ok := ack.ReasonCode < 0x80; ok != wantOK {
			t.Fatalf("PUBACK %#x for retained %q on %s, want success %v", ack.ReasonCode, payload, topic, wantOK)
		}
	}
	publish(t, "undo/f/kept", "before", true)
	publish(t, "undo/f/cleared", "before", true)
	eng.refuse.Store(true)
	publish(t, "undo/f/kept", "failed", false)
	publish(t, "undo/f/new", "failed", false)
	publish(t, "undo/f/cleared", "", false)
	eng.refuse.Store(false)

	got := retainedOf(t, g, "undo-sub", "undo/#", "undo/marker")
	want := map[string]string{"undo/f/kept": "before", "undo/f/cleared": "before"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("retained messages after appends that failed: %v, want %v", got, want)
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_retained_total", map[string]string{"result": "undone"}); n != 3 {
		t.Errorf("switchyard_mqtt_retained_total{result=undone} = %v, want 3", n)
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_retained_messages", nil); n != 2 {
		t.Errorf("switchyard_mqtt_retained_messages = %v, want 2", n)
	}
}

// TestMQTTRetainedWillUndoneWhenAppendFails: a retained will whose append
// fails leaves the topic's previous retained message in place.
func TestMQTTRetainedWillUndoneWhenAppendFails(t *testing.T) {
	var eng *refusingAppends
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine {
			eng = &refusingAppends{Engine: e.(*memengine.Engine), prefix: "undo.w"}
			return eng
		}
	})
	pub, err := dialMQTT(t, g, 5, "tcp", "undo-will-pub", "")
	if err != nil {
		t.Fatal(err)
	}
	pub.publishRetained(t, "undo/w/status", 1, "online")
	lost := dialRaw(t, g, "tcp", 5)
	if rc := willConnect(t, lost, "undo-will", "undo/w/status", "offline", true, 0, 0); rc != 0 {
		t.Fatalf("CONNACK %#x", rc)
	}
	eng.refuse.Store(true)
	lost.nc.Close()
	waitMetric(t, g, "switchyard_mqtt_wills_total", map[string]string{"result": "failed"}, 1)
	eng.refuse.Store(false)

	got := retainedOf(t, g, "undo-will-sub", "undo/#", "undo/marker")
	if want := map[string]string{"undo/w/status": "online"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("retained messages after a retained will's append failed: %v, want %v", got, want)
	}
	if n := metricValue(t, g.reg, "switchyard_mqtt_retained_total", map[string]string{"result": "undone"}); n != 1 {
		t.Errorf("switchyard_mqtt_retained_total{result=undone} = %v, want 1", n)
	}
}

// unconfirmedRetained is the memory engine whose SetRetained makes its
// write and then fails, as a JetStream one does whose put was stored but
// not seen by the node's view in time.
type unconfirmedRetained struct {
	*memengine.Engine
	fail atomic.Bool
}

func (e *unconfirmedRetained) SetRetained(ctx context.Context, m engine.RetainedMessage, lim engine.RetainLimits) (engine.RetainedWrite, error) {
	w, err := e.Engine.SetRetained(ctx, m, lim)
	if err == nil && e.fail.Load() {
		err = fmt.Errorf("retained write not confirmed (test): %w", engine.ErrUnavailable)
	}
	return w, err
}

// TestMQTTRetainedUndoneWhenStoreFailsAfterWrite: a retained PUBLISH whose
// store fails after making its write (PUBACK 0x80, not appended) leaves
// the topic's previous retained message in place.
func TestMQTTRetainedUndoneWhenStoreFailsAfterWrite(t *testing.T) {
	var eng *unconfirmedRetained
	g := newGateway(t, withMQTT, func(c *gwConfig) {
		c.wrap = func(e engine.Engine) engine.Engine {
			eng = &unconfirmedRetained{Engine: e.(*memengine.Engine)}
			return eng
		}
	})
	r := dialRaw(t, g, "tcp", 5)
	r.connect(t, "unconfirmed-pub", 30)
	for i, c := range []struct {
		payload string
		fail    bool
	}{{"before", false}, {"unconfirmed", true}} {
		eng.fail.Store(c.fail)
		r.send(t, packets.Packet{FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Retain: true},
			TopicName: "undo/s/t", PacketID: uint16(i + 1), Payload: []byte(c.payload)})
		if ack := r.expect(t, packets.Puback); (ack.ReasonCode >= 0x80) != c.fail {
			t.Fatalf("PUBACK %#x for %q, want a failure %v", ack.ReasonCode, c.payload, c.fail)
		}
	}
	eng.fail.Store(false)
	got := retainedOf(t, g, "unconfirmed-sub", "undo/#", "undo/marker")
	if want := map[string]string{"undo/s/t": "before"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("retained messages after a store that failed after its write: %v, want %v", got, want)
	}
}
