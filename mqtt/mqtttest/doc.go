// Package mqtttest is Switchyard's differential harness for MQTT: it
// generates a seeded random script of MQTT client actions, runs it against
// a broker with real Paho clients (github.com/eclipse/paho.golang for MQTT
// 5, github.com/eclipse/paho.mqtt.golang for 3.1.1) recording what every
// client receives, and compares two recordings, tolerating by name only
// the differences MQTT leaves open (MQTTOpen) and, by its own name, one
// known deviation of Mosquitto (MosquittoOverlapQoS). Mosquitto is the
// reference broker; the Switchyard MQTT transport is to be run against
// the same scripts.
//
// # Scripts
//
// Generate draws a Script from a seed: clients with MQTT 3.1.1 or 5,
// connects with clean or persistent sessions, subscribes with '+' and '#'
// filters and shared subscriptions (one per group), publishes at QoS 0 to 2, retained or
// not, unsubscribes, disconnects and reconnects. Topics in a script are
// relative; Run puts them under a prefix of its own, so that runs do not
// see each other, and clears the retained messages and persistent
// sessions it made when it ends.
//
// # Synchronisation
//
// After every step, Run waits, client by client (the acting client first),
// until the client has received a marker message it published to its own
// topic. A broker that delivers to one session in the order it routed the
// messages (Mosquitto does) has then delivered everything the step caused
// before the marker; the marker wait is bounded by Options.StepTimeout.
//
// # Concurrency
//
// Generate and Compare are safe for concurrent use. Run starts the Paho
// clients' goroutines and stops every one of them before it returns.
package mqtttest
