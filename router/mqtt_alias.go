package router

// Topic aliases of MQTT 5 (docs/mqtt.md, "Topic aliases"), client to
// gateway: a PUBLISH with a Topic Alias and a topic name sets the alias;
// one with the alias and an empty topic name uses the name it holds. The
// CONNACK announces Topic Alias Maximum (MQTTOptions.MaxTopicAliases); an
// alias of 0 or above it, or an empty topic name with an alias never set,
// ends the session with DISCONNECT 0x94 (Topic Alias invalid), counted in
// switchyard_mqtt_disconnects_total. The table is the reader goroutine's
// and holds at most MaxTopicAliases names of at most Bounds.MaxTopicBytes
// bytes each (a longer name is refused as a topic anyway and is not
// kept), each a copy, so that no alias keeps a packet's buffer alive.
//
// Gateway to client: when an MQTT 5 CONNECT carries a Topic Alias
// Maximum above 0, the gateway gives the connection up to that many
// aliases, and at most MQTTOptions.MaxSentTopicAliases naming at most
// MQTTOptions.MaxSentTopicAliasBytes bytes of topic names. A topic gets
// the next alias on its first delivery while the table has room: that
// PUBLISH carries the topic name and the alias, every later one the alias
// and an empty topic name. Aliases are never replaced (no eviction): a
// device's session delivers a handful of topics again and again, which
// the first deliveries name; replacing an alias would send the name
// again on both topics' next deliveries and cost a table kept in use
// order, for a session whose topics outnumber its aliases, whose later
// topics simply go with their names. Once the table is full a new topic
// goes with its name and no alias (counted once per connection in
// switchyard_mqtt_sent_topic_aliases_full_total).
//
// The PUBLISH of a record is still encoded once for every session it
// reaches (mqtt_write.go): the writer copies each shared packet into the
// connection's write buffer anyway, and the alias is written during that
// copy (mqtt.AppendPublishAlias), in the order the packets go out, so
// that a held QoS 1 or 2 delivery is aliased when it is sent, not when it
// was queued. A first use that would take the packet past the client's
// Maximum Packet Size goes without the alias.
//
// The inbound table (topics) is the reader goroutine's; the outbound one
// (out) is set by openSession before the session runs and is the writer
// goroutine's from then on.

import (
	"strings"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/switchyard/switchyard/mqtt"
)

// mqttAliases is a session's topic alias tables; the zero value is empty.
type mqttAliases struct {
	topics []string         // by alias; made on first use, MaxTopicAliases+1 long
	out    *mqttSentAliases // the aliases the gateway gives (writer goroutine); nil: none
}

// mqttSentAliases are the topic aliases the gateway gave a connection.
type mqttSentAliases struct {
	max     int               // aliases it may give; 0: none
	byTopic map[string]uint16 // by MQTT topic name; made on first use
	bytes   int               // of the names in byTopic
	full    bool              // a topic went without an alias (counted)
}

// setSentAliases sets the aliases the gateway may give the session of
// the CONNECT pk (openSession, before the session runs).
func (s *mqttSession) setSentAliases(pk *packets.Packet) {
	if s.version != mqtt.Version5 {
		return
	}
	if n := min(int(pk.Properties.TopicAliasMaximum), s.rt.mq.opts.MaxSentTopicAliases); n > 0 {
		s.aliases.out = &mqttSentAliases{max: n}
	}
}

// appendPacket appends the queued packet pkt (whose packet identifier, if
// any, is at idAt) to out, with a topic alias when the session has one
// for its topic or one to give, and returns out and the offset of the
// identifier in the packet appended.
func (s *mqttSession) appendPacket(out, pkt []byte, idAt int) ([]byte, int) {
	a := s.aliases.out
	if a == nil || a.max == 0 {
		return append(out, pkt...), idAt
	}
	topic, ok := mqtt.PublishTopic(pkt)
	if !ok || len(topic) == 0 {
		return append(out, pkt...), idAt
	}
	alias, known := a.byTopic[string(topic)]
	if !known {
		if len(a.byTopic) >= a.max || a.bytes+len(topic) > s.rt.mq.opts.MaxSentTopicAliasBytes {
			a.noteFull(s)
			return append(out, pkt...), idAt
		}
		if a.byTopic == nil {
			a.byTopic = make(map[string]uint16, min(a.max, 16))
		}
		alias = uint16(len(a.byTopic) + 1)
	}
	start := len(out)
	o, at, ok := mqtt.AppendPublishAlias(out, pkt, alias, !known)
	if ok && s.maxOut > 0 && len(o)-start > int(s.maxOut) {
		// The alias property (and a longer length) took the packet past
		// the client's Maximum Packet Size [MQTT-3.1.2-24]: it goes with
		// its topic name, which fits, and no alias; a first use gives none.
		ok = false
	}
	if !ok {
		return append(out[:start], pkt...), idAt
	}
	if !known {
		a.byTopic[string(topic)] = alias
		a.bytes += len(topic)
		s.rt.mq.m.aliasesSet.Inc()
	}
	return o, at
}

// noteFull counts, once per connection, a topic that went without an alias.
func (a *mqttSentAliases) noteFull(s *mqttSession) {
	if !a.full {
		a.full = true
		s.rt.mq.m.aliasesFull.Inc()
	}
}

// resolveAlias sets or resolves pk's topic alias, reporting whether to
// go on; it has ended the session otherwise.
func (s *mqttSession) resolveAlias(pk *packets.Packet) bool {
	alias, max := int(pk.Properties.TopicAlias), s.rt.mq.opts.MaxTopicAliases
	if alias == 0 || alias > max {
		s.end(rcTopicAliasInvalid, "topic alias 0 or above the Topic Alias Maximum") // [MQTT-3.3.2-8], [MQTT-3.3.2-9]
		return false
	}
	a := &s.aliases
	if pk.TopicName == "" {
		if alias >= len(a.topics) || a.topics[alias] == "" {
			s.end(rcTopicAliasInvalid, "unknown topic alias with an empty topic name")
			return false
		}
		pk.TopicName = a.topics[alias]
		return true
	}
	if len(pk.TopicName) > s.rt.opts.Bounds.MaxTopicBytes {
		return true // refused by its length as any topic is; not kept
	}
	if a.topics == nil {
		a.topics = make([]string, max+1)
	}
	a.topics[alias] = strings.Clone(pk.TopicName)
	return true
}

// DefaultMQTTMaxTopicAliases is MQTTOptions.MaxTopicAliases' default:
// enough for a device's handful of topics, at most 16 names of
// Bounds.MaxTopicBytes each per session.
const DefaultMQTTMaxTopicAliases = 16

// Defaults of the aliases the gateway gives: as many as a client may set
// by default, for a device's handful of topics; 2 KiB of names holds 16
// topics of 128 bytes, and bounds a connection's table, map included, to
// a few KiB.
const (
	DefaultMQTTMaxSentTopicAliases    = 16
	DefaultMQTTMaxSentTopicAliasBytes = 2 << 10
)
