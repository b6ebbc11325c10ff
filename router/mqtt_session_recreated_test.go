package router_test

import (
	"fmt"
	"testing"

	"github.com/switchyard/switchyard/engine/jsengine/natstest"
)

// TestMQTTSessionRecreatedTopicResumesFromStart: a topic the session had
// read (so its stored position names an offset of it) is deleted and made
// again after the session's connection ended. Every record of the new
// topic came while the client was away; the resume must deliver them all,
// not start at the old topic's stored offset, which in the new topic skips
// its first records without a gap counted.
func TestMQTTSessionRecreatedTopicResumesFromStart(t *testing.T) {
	sessionRecreatedTopic(t, newGateway(t, withMQTT))
}

// TestMQTTSessionRecreatedTopicResumesFromStartJetStream is
// TestMQTTSessionRecreatedTopicResumesFromStart on JetStream, whose
// session store keeps the topic's creation time with each position.
func TestMQTTSessionRecreatedTopicResumesFromStartJetStream(t *testing.T) {
	url := natstest.URL(t)
	sessionRecreatedTopic(t, newJSGateway(t, url, natstest.Prefix(t, url)))
}

func sessionRecreatedTopic(t *testing.T, g *gateway) {
	pub, _ := dialSession(t, g, 5, "tcp", "rvr-pub", true, 0)
	c, _ := dialSession(t, g, 5, "tcp", "rvr-1", false, 600)
	c.subscribe(t, "rvr/t", 1)
	for i := range 3 {
		pub.publish(t, "rvr/t", 1, fmt.Sprint("old", i))
	}
	c.expectPayloads(t, "old0", "old1", "old2")
	c.leave(t, g, "rvr-1")
	if code, _, _ := g.httpDo(t, "DELETE", "/v1/topics/rvr.t", nil); code != 204 {
		t.Fatalf("topic not deleted: %d", code)
	}
	for i := range 5 {
		pub.publish(t, "rvr/t", 1, fmt.Sprint("new", i)) // made again by the publish
	}
	c2, present := dialSession(t, g, 5, "tcp", "rvr-1", false, 600)
	if !present {
		t.Fatal("Session Present 0")
	}
	c2.expectPayloads(t, "new0", "new1", "new2", "new3", "new4")
}
