package main

// Settings of the MQTT transport (docs/mqtt.md): the TCP listener and the
// bounds of an MQTT session. MQTT over WebSocket (GET /mqtt) is always on,
// on the gateway's own listener.

import "github.com/switchyard/switchyard/router"

func (c *config) mqttFlags(r *registry) {
	r.in(groupMQTT)
	m := &c.Router.MQTT
	r.string(&m.Addr, "mqtt-addr", "", "TCP address of the MQTT 3.1.1 and 5.0 listener (host:port); empty: none (MQTT over WebSocket is served at GET /mqtt either way)")
	r.int(&m.MaxPacketBytes, "mqtt-max-packet-bytes", 0, "largest packet an MQTT client may send, announced as MQTT 5's Maximum Packet Size; a larger one ends the session (reason 0x95) (0: --max-message-bytes plus 64 KiB)")
	r.int(&m.MaxInFlight, "mqtt-max-in-flight", router.DefaultMQTTMaxInFlight, "QoS 1 and 2 deliveries an MQTT session may have unacknowledged (a client's smaller Receive Maximum wins); further ones wait, within --queue-messages")
	r.int(&m.MaxClientIDBytes, "mqtt-max-client-id-bytes", router.DefaultMQTTMaxClientIDBytes, "longest MQTT client identifier; a longer one is refused (CONNACK 0x85, or 2 for 3.1.1)")
	r.int(&m.MaxHeldBytes, "mqtt-max-held-bytes", router.DefaultMQTTMaxHeldBytes, "bytes of the QoS 1 and 2 deliveries an MQTT session holds while its in-flight window is full (copies, the session's own); past it the oldest is dropped, counted")
	r.int(&m.MaxRetained, "mqtt-max-retained", router.DefaultMQTTMaxRetained, "retained MQTT messages kept in all (every node's on JetStream); past it a retained PUBLISH for a new topic is refused (reason 0x97)")
	r.int64(&m.MaxRetainedBytes, "mqtt-max-retained-bytes", router.DefaultMQTTMaxRetainedBytes, "bytes of the retained MQTT messages (topic, key, headers, payload), as --mqtt-max-retained; each JetStream node keeps them in memory")
	r.int(&m.MaxPendingWills, "mqtt-max-pending-wills", router.DefaultMQTTMaxPendingWills, "MQTT 5 will messages held for their will delay, over all client ids; past it a will is published at once")
	r.duration(&m.ConnectTimeout, "mqtt-connect-timeout", router.DefaultMQTTConnectTimeout, "how long a new MQTT connection may take to send CONNECT")
}
