// Package mqtt holds the parts of Switchyard's MQTT 3.1, 3.1.1 and 5.0
// transport that do not depend on the session core: the mapping between
// MQTT topic names and filters and Switchyard's topics and patterns, and
// the packet codec layer (reading a packet with a size bound, encoding a
// PUBLISH once for every session it is written to, and finding and
// patching a queued packet's identifier).
//
// The transport itself (listeners, CONNECT and session state, the QoS
// flows) is in package router (mqtt*.go), on the transport-neutral session
// core; docs/mqtt.md is its reference, with what is still to come.
// Subpackage mqtttest holds the differential harness that runs one
// randomised script of MQTT clients against two brokers (Mosquitto being
// the reference) and compares what the clients received.
//
// # Topics
//
// TopicToNative, TopicFromNative and ParseFilter implement the mapping
// documented on them and in docs/mqtt.md: '/' levels are '.' segments, '+'
// is '*', a filter ending in "/#" is two native patterns (the parent and
// its descendants), levels made of Switchyard name characters are
// unchanged, and every other level is escaped reversibly.
//
// # Packets
//
// Packets decode with the packets package of github.com/mochi-mqtt/server/v2
// (protocol levels 3, 4 and 5) under ReadPacket and DecodePacket, which
// bound a packet's size before allocating for it and turn anything the
// codec chokes on into ErrMalformed. The PUBLISH, the one packet on the
// delivery path, has an encoder of its own: EncodePublish encodes it once
// into a Publish whose bytes any number of sessions write, each with its
// own packet identifier and flags; EncodePublishFrame gives those bytes
// for a queue of frames, and Span and PatchPublish let a session's writer
// find a queued packet's end and write its own identifier;
// AppendPublishAlias makes that same copy with an MQTT 5 topic alias
// (PublishTopic reads the name it stands for). docs/mqtt.md gives the
// measurements behind these choices.
//
// # Concurrency
//
// All functions are safe for concurrent use by multiple goroutines. A
// Publish is immutable once made and safe for concurrent use; its methods
// write only to the buffers the caller passes. The package starts no
// goroutines.
package mqtt
