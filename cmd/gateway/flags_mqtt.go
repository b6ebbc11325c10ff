package main

// Settings of the MQTT transport (docs/mqtt.md): the TCP listener and the
// bounds of an MQTT session. MQTT over WebSocket (GET /mqtt) is always on,
// on the gateway's own listener.

import "github.com/switchyard/switchyard/router"

func (c *config) mqttFlags(r *registry) {
	r.in(groupMQTT)
	m := &c.Router.MQTT
	r.string(&m.Addr, "mqtt-addr", "", "TCP address of the MQTT 3.1, 3.1.1 and 5.0 listener (host:port), over TLS with --tls-cert and --tls-key; empty: none (MQTT over WebSocket is served at GET /mqtt either way)")
	r.int(&m.MaxPacketBytes, "mqtt-max-packet-bytes", 0, "largest packet an MQTT client may send, announced as MQTT 5's Maximum Packet Size; a larger one ends the session (reason 0x95) (0: --max-message-bytes plus 64 KiB)")
	r.int(&m.MaxInFlight, "mqtt-max-in-flight", router.DefaultMQTTMaxInFlight, "QoS 1 and 2 deliveries an MQTT session may have unacknowledged (a client's smaller Receive Maximum wins); further ones wait, within --queue-messages")
	r.int(&m.MaxClientIDBytes, "mqtt-max-client-id-bytes", router.DefaultMQTTMaxClientIDBytes, "longest MQTT client identifier; a longer one is refused (CONNACK 0x85, or 2 for 3.1.1)")
	r.int(&m.MaxHeldBytes, "mqtt-max-held-bytes", router.DefaultMQTTMaxHeldBytes, "bytes of the QoS 1 and 2 deliveries an MQTT session holds while its in-flight window is full (copies, the session's own); past it the oldest live one is dropped, counted (a persistent session's resume replay waits instead)")
	r.int(&m.MaxRetained, "mqtt-max-retained", router.DefaultMQTTMaxRetained, "retained MQTT messages kept in all (every node's on JetStream); past it a retained PUBLISH for a new topic is refused (reason 0x97)")
	r.int64(&m.MaxRetainedBytes, "mqtt-max-retained-bytes", router.DefaultMQTTMaxRetainedBytes, "bytes of the retained MQTT messages (topic, key, headers, payload), as --mqtt-max-retained; each JetStream node keeps them in memory")
	r.int(&m.MaxPendingWills, "mqtt-max-pending-wills", router.DefaultMQTTMaxPendingWills, "MQTT 5 will messages held for their will delay, over all client ids; past it a will is published at once")
	r.int(&m.MaxSessions, "mqtt-max-sessions", router.DefaultMQTTMaxSessions, "MQTT persistent sessions stored in all (every node's, on JetStream); past it a CONNECT that would store one more is refused (CONNACK 0x97, or 3 for 3.1.1)")
	r.int64(&m.MaxSessionBytes, "mqtt-max-session-bytes", router.DefaultMQTTMaxSessionBytes, "bytes of one stored MQTT session (filters and positions); a SUBSCRIBE past it gets 0x97 for the filter, positions past it are left out (their partitions resume from the subscription's start)")
	r.duration(&m.MaxSessionExpiry, "mqtt-max-session-expiry", router.DefaultMQTTMaxSessionExpiry, "longest MQTT session expiry: an MQTT 5 client's longer interval is lowered to it, and a 3.1.1 session that is not clean lasts this long after its connection")
	r.int(&m.MaxTopicAliases, "mqtt-max-topic-aliases", router.DefaultMQTTMaxTopicAliases, "topic aliases an MQTT 5 client may set (its CONNACK's Topic Alias Maximum), each holding a topic name of at most --max-topic-bytes; -1: none")
	r.int(&m.MaxSentTopicAliases, "mqtt-max-sent-topic-aliases", router.DefaultMQTTMaxSentTopicAliases, "topic aliases the gateway gives an MQTT 5 connection whose CONNECT allows them (within its Topic Alias Maximum), one per topic on its first delivery, never replaced; -1: none")
	r.int(&m.MaxSentTopicAliasBytes, "mqtt-max-sent-topic-alias-bytes", router.DefaultMQTTMaxSentTopicAliasBytes, "bytes of the topic names the aliases of --mqtt-max-sent-topic-aliases stand for, per connection; past it a new topic goes with its name and no alias")
	r.duration(&m.ConnectTimeout, "mqtt-connect-timeout", router.DefaultMQTTConnectTimeout, "how long a new MQTT connection may take to send CONNECT")
}
