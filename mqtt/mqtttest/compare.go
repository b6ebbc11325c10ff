package mqtttest

import (
	"fmt"
	"slices"
	"strings"
)

// Tolerance names one difference between two recordings that MQTT leaves
// to the broker. Compare ignores a difference only under a tolerance it
// is given; docs/mqtt.md lists them.
type Tolerance string

const (
	// OrderAcrossTopics: MQTT orders messages per topic (MQTT 5 section
	// 4.6, 3.1.1 section 4.6), not across topics, so a client's messages
	// are compared topic by topic.
	OrderAcrossTopics Tolerance = "order-across-topics"
	// SharedMemberChoice: which member of a shared subscription gets a
	// message is the broker's choice (MQTT 5 section 4.8.2), so shared
	// deliveries are compared as one multiset per group over all members
	// and connections.
	SharedMemberChoice Tolerance = "shared-member-choice"
	// OverlappingCopies: a client whose subscriptions overlap may get one
	// copy of a message or one per matching subscription (MQTT 3.1.1
	// section 3.3.5, MQTT 5 section 3.3.4), at the highest of their QoS,
	// so such copies count once at their highest QoS.
	OverlappingCopies Tolerance = "overlapping-subscription-copies"
	// QoS0WhileOffline: a broker may or may not queue QoS 0 messages for
	// a persistent session while its client is away (MQTT 3.1.1 section
	// 3.1.2.4, MQTT 5 section 4.1), so such messages are ignored in the
	// connection that resumes the session.
	QoS0WhileOffline Tolerance = "qos0-while-offline"
)

// MQTTOpen is every tolerance for a difference MQTT leaves open.
var MQTTOpen = []Tolerance{OrderAcrossTopics, SharedMemberChoice, OverlappingCopies, QoS0WhileOffline}

// MosquittoOverlapQoS is not a difference MQTT leaves open but a known
// deviation of the reference broker, tolerated only when comparing
// against it and only by this name: Mosquitto 2.0 sends a 3.1.1 client
// whose subscriptions overlap one copy at the QoS of one of the matching
// subscriptions (the first in its own order), where MQTT 3.1.1 requires
// the highest [MQTT-3.3.5-1]. Under it, the QoS of such a client's copies
// of such a message is not compared. TestMosquittoOverlapQoS pins the
// deviation, so a Mosquitto that fixes it is noticed.
const MosquittoOverlapQoS Tolerance = "mosquitto-3.1.1-overlap-qos"

// Difference is one way two recordings of a script differ.
type Difference struct {
	Client int    // index in the script; -1 for a group's shared deliveries
	Conn   int    // the client's connection; -1 when not about one
	What   string // what differs, with both sides
}

func (d Difference) String() string {
	return fmt.Sprintf("client %d connection %d: %s", d.Client, d.Conn, d.What)
}

// Compare returns the differences between recordings a and b of script s
// that no given tolerance covers; none means they agree.
func Compare(s Script, a, b *Recording, tol ...Tolerance) []Difference {
	has := func(t Tolerance) bool { return slices.Contains(tol, t) }
	m := model(s)
	var diffs []Difference
	diff := func(c, k int, format string, args ...any) {
		diffs = append(diffs, Difference{Client: c, Conn: k, What: fmt.Sprintf(format, args...)})
	}
	shared := [2]map[string][]string{{}, {}}
	for c := range s.Clients {
		ca, cb := conns(a, c), conns(b, c)
		if len(ca) != len(cb) {
			diff(c, -1, "%d connections against %d", len(ca), len(cb))
			continue
		}
		for k := range ca {
			x, y := ca[k], cb[k]
			if x.SessionPresent != y.SessionPresent {
				diff(c, k, "session present %v against %v", x.SessionPresent, y.SessionPresent)
			}
			if !slices.Equal(x.Granted, y.Granted) {
				diff(c, k, "SUBACK codes %v against %v", x.Granted, y.Granted)
			}
			keysA := m.keys(s, c, x, has, shared[0])
			keysB := m.keys(s, c, y, has, shared[1])
			topics := map[string]bool{}
			for t := range keysA {
				topics[t] = true
			}
			for t := range keysB {
				topics[t] = true
			}
			for _, t := range sortedKeys(topics) {
				if !slices.Equal(keysA[t], keysB[t]) {
					diff(c, k, "%s: %v against %v", t, keysA[t], keysB[t])
				}
			}
		}
	}
	groups := map[string]bool{}
	for g := range shared[0] {
		groups[g] = true
	}
	for g := range shared[1] {
		groups[g] = true
	}
	for _, g := range sortedKeys(groups) {
		x, y := slices.Sorted(slices.Values(shared[0][g])), slices.Sorted(slices.Values(shared[1][g]))
		if !slices.Equal(x, y) {
			diffs = append(diffs, Difference{Client: -1, Conn: -1,
				What: fmt.Sprintf("shared group %s received %v against %v", g, x, y)})
		}
	}
	return diffs
}

func conns(r *Recording, c int) []Connection {
	if r == nil || c >= len(r.Clients) {
		return nil
	}
	return r.Clients[c]
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// scriptModel is what Compare needs to know of a script: when each
// payload was published, and which deliveries overlapping subscriptions
// may duplicate.
type scriptModel struct {
	published map[string]int  // payload -> step
	overlap   map[[2]any]bool // (client, payload) published while >= 2 of the client's plain subscriptions matched
}

func model(s Script) scriptModel {
	m := scriptModel{published: map[string]int{}, overlap: map[[2]any]bool{}}
	subs := make([]map[string]bool, len(s.Clients))
	clean := make([]bool, len(s.Clients))
	for i, st := range s.Steps {
		switch st.Op {
		case OpConnect:
			if st.Clean || subs[st.Client] == nil {
				subs[st.Client] = map[string]bool{}
			}
			clean[st.Client] = st.Clean
		case OpDisconnect:
			if clean[st.Client] {
				subs[st.Client] = nil
			}
		case OpSubscribe:
			subs[st.Client][st.Filter] = true
		case OpUnsubscribe:
			delete(subs[st.Client], st.Filter)
		case OpPublish:
			if st.Payload != "" {
				m.published[st.Payload] = i
			}
			for c, fs := range subs {
				n := 0
				for f := range fs {
					if !strings.HasPrefix(f, "$share/") && Matches(f, st.Topic) {
						n++
					}
				}
				if n >= 2 {
					m.overlap[[2]any{c, st.Payload}] = true
				}
			}
		}
	}
	return m
}

// keys turns one connection's messages into comparable strings per topic
// (or all under "" when order across topics counts), applying the
// tolerances; shared deliveries go to shared, per group, when their
// member choice is tolerated.
func (m scriptModel) keys(s Script, c int, conn Connection, has func(Tolerance) bool,
	shared map[string][]string) map[string][]string {
	resumed := !s.Steps[conn.Step].Clean
	prevEnd := -1 // the step that ended the previous connection
	for i := conn.Step - 1; i >= 0; i-- {
		if st := s.Steps[i]; st.Client == c && st.Op == OpDisconnect {
			prevEnd = i
			break
		}
	}
	out := map[string][]string{}
	seen := map[string]int{} // key without QoS -> index in out[topic]
	for _, msg := range conn.Messages {
		if has(SharedMemberChoice) && strings.HasPrefix(msg.Topic, "s/") && s.Clients[c].Group != "" {
			g := s.Clients[c].Group
			shared[g] = append(shared[g], msg.String())
			continue
		}
		if p, ok := m.published[msg.Payload]; ok && has(QoS0WhileOffline) && resumed && msg.QoS == 0 &&
			!msg.Retain && prevEnd >= 0 && p > prevEnd && p < conn.Step {
			continue
		}
		t := msg.Topic
		if !has(OrderAcrossTopics) {
			t = ""
		}
		key := msg.String()
		overlap := m.overlap[[2]any{c, msg.Payload}]
		if overlap && has(MosquittoOverlapQoS) && s.Clients[c].Version == 4 {
			msg.QoS = 0
			key = strings.Replace(msg.String(), " qos0", " qos?", 1)
		}
		if overlap && has(OverlappingCopies) {
			id := fmt.Sprintf("%s %q %v", msg.Topic, msg.Payload, msg.Retain)
			if j, ok := seen[id]; ok {
				if out[t][j] < key { // the same text but the QoS digit: keep the highest
					out[t][j] = key
				}
				continue
			}
			seen[id] = len(out[t])
		}
		out[t] = append(out[t], key)
	}
	return out
}

// Matches reports whether an MQTT topic filter matches a topic name, as
// MQTT specifies: '+' is one level, a last '#' the parent level and every
// level below, and a filter starting with a wildcard matches no topic
// starting with '$'.
func Matches(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	f, t := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, fl := range f {
		if fl == "#" {
			return true
		}
		if i >= len(t) || fl != "+" && fl != t[i] {
			return false
		}
	}
	return len(f) == len(t)
}
