package mqtttest

import (
	"fmt"
	"math/rand/v2"
	"strings"
)

// Op is the kind of a script step.
type Op int

// The steps of a script.
const (
	OpConnect Op = iota
	OpDisconnect
	OpSubscribe
	OpUnsubscribe
	OpPublish
)

func (o Op) String() string {
	return [...]string{"connect", "disconnect", "subscribe", "unsubscribe", "publish"}[o]
}

// Client is one MQTT client of a script.
type Client struct {
	Name    string // part of its client id, unique in the script
	Version byte   // 4 (MQTT 3.1.1) or 5
	// Group is the share name of the one shared subscription the client
	// may join, "" if none. Such a client always starts clean sessions.
	Group string
}

// Step is one action of one client.
type Step struct {
	Op     Op
	Client int  // index in Script.Clients
	Clean  bool // OpConnect: clean session (3.1.1) or clean start with no session expiry (5)
	// Filter is the relative topic filter of OpSubscribe and OpUnsubscribe;
	// a shared one is "$share/<group>/" followed by the relative filter.
	Filter  string
	QoS     byte   // OpSubscribe: maximum QoS; OpPublish: QoS
	Topic   string // OpPublish: relative topic name
	Payload string // OpPublish: unique in the script, or "" to clear a retained message
	Retain  bool   // OpPublish
}

func (s Step) String() string {
	switch s.Op {
	case OpConnect:
		return fmt.Sprintf("c%d connect clean=%v", s.Client, s.Clean)
	case OpDisconnect:
		return fmt.Sprintf("c%d disconnect", s.Client)
	case OpSubscribe:
		return fmt.Sprintf("c%d subscribe %q qos %d", s.Client, s.Filter, s.QoS)
	case OpUnsubscribe:
		return fmt.Sprintf("c%d unsubscribe %q", s.Client, s.Filter)
	}
	return fmt.Sprintf("c%d publish %q %q qos %d retain=%v", s.Client, s.Topic, s.Payload, s.QoS, s.Retain)
}

// Script is a sequence of steps of a fixed set of clients. Topics under
// "t/" are for plain subscriptions, those under "s/" for shared ones;
// group g1 shares "s/#" and group g2 "s/+".
type Script struct {
	Seed    uint64
	Clients []Client
	Steps   []Step
}

func (s Script) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d\n", s.Seed)
	for i, c := range s.Clients {
		fmt.Fprintf(&b, "c%d %s v%d group %q\n", i, c.Name, c.Version, c.Group)
	}
	for i, st := range s.Steps {
		fmt.Fprintf(&b, "%3d %s\n", i, st)
	}
	return b.String()
}

// The vocabulary scripts draw from: few enough names that filters and
// topics often meet.
var (
	plainTopics  = []string{"t/a", "t/b", "t/a/x", "t/b/x", "t/a/x/y"}
	sharedTopics = []string{"s/a", "s/b"}
	plainFilters = []string{"t/a", "t/b", "t/a/x", "t/+", "t/+/x", "t/#", "t/a/#", "t/+/+"}
	groups       = []string{"g1", "g2"}
	// Each group has one shared subscription, so every message on a
	// matching topic goes to exactly one of its members: a client holding
	// two shared subscriptions of one group that both match would make
	// the count depend on the broker (one copy or one per subscription).
	sharedFilter = map[string]string{"g1": "s/#", "g2": "s/+"}
)

// Generate returns a script of about steps steps drawn from seed. The same
// seed gives the same script.
func Generate(seed uint64, steps int) Script {
	rng := rand.New(rand.NewPCG(seed, 0x5357495443485944))
	s := Script{Seed: seed}
	n := 3 + rng.IntN(4)
	for i := range n {
		c := Client{Name: fmt.Sprintf("c%d", i), Version: 4 + byte(rng.IntN(2))}
		if i < 2*len(groups) && rng.IntN(2) == 0 {
			c.Group = groups[i%len(groups)]
		}
		s.Clients = append(s.Clients, c)
	}
	// Every client of a group subscribes at the same QoS, so which member
	// gets a message does not change the QoS it arrives with.
	groupQoS := map[string]byte{}
	for _, g := range groups {
		groupQoS[g] = byte(rng.IntN(3))
	}
	g := generator{rng: rng, s: &s, connected: make([]bool, n), subs: make([][]string, n)}
	for range steps {
		g.step(groupQoS)
	}
	for i := range s.Clients { // end with everyone gone, so a run leaves nothing behind
		if g.connected[i] {
			s.Steps = append(s.Steps, Step{Op: OpDisconnect, Client: i})
		}
	}
	return s
}

type generator struct {
	rng       *rand.Rand
	s         *Script
	connected []bool
	subs      [][]string // filters a client subscribed in its current connection
	payloads  int
}

func (g *generator) step(groupQoS map[string]byte) {
	i := g.rng.IntN(len(g.s.Clients))
	c := g.s.Clients[i]
	add := func(st Step) { st.Client = i; g.s.Steps = append(g.s.Steps, st) }
	if !g.connected[i] {
		g.connected[i], g.subs[i] = true, nil
		add(Step{Op: OpConnect, Clean: c.Group != "" || g.rng.IntN(5) < 3})
		return
	}
	switch r := g.rng.IntN(20); {
	case r < 2:
		g.connected[i] = false
		add(Step{Op: OpDisconnect})
	case r < 7:
		st := Step{Op: OpSubscribe, Filter: pick(g.rng, plainFilters), QoS: byte(g.rng.IntN(3))}
		if c.Group != "" && g.rng.IntN(2) == 0 {
			st.Filter = "$share/" + c.Group + "/" + sharedFilter[c.Group]
			st.QoS = groupQoS[c.Group]
		}
		g.subs[i] = append(g.subs[i], st.Filter)
		add(st)
	case r < 8 && len(g.subs[i]) > 0:
		add(Step{Op: OpUnsubscribe, Filter: pick(g.rng, g.subs[i])})
	default:
		g.payloads++
		st := Step{Op: OpPublish, QoS: byte(g.rng.IntN(3)), Payload: fmt.Sprintf("m%d", g.payloads)}
		if g.rng.IntN(4) == 0 {
			st.Topic = pick(g.rng, sharedTopics)
		} else {
			st.Topic = pick(g.rng, plainTopics)
			st.Retain = g.rng.IntN(5) == 0
			if st.Retain && g.rng.IntN(4) == 0 {
				st.Payload = "" // clears the topic's retained message
			}
		}
		add(st)
	}
}

func pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// Features are the parts of MQTT a broker under test offers, for Restrict.
type Features struct {
	QoS2       bool // QoS 2 publishes and subscriptions
	Retained   bool // retained messages
	Shared     bool // shared subscriptions
	Persistent bool // sessions that outlive their connection
	// PublishQoS: deliveries carry the lower of the publish's and the
	// subscription's QoS. Without it, a broker delivers at the
	// subscription's QoS, so every publish is made at the highest QoS
	// the broker offers, where both rules agree.
	PublishQoS bool
}

// Restrict returns s with what f lacks taken out, so that a broker
// offering only f can be compared with one offering everything: QoS 2
// becomes QoS 1, retained publishes plain ones (those clearing a retained
// message go), shared subscriptions go (and their unsubscribes), every
// connect starts a clean session, and without PublishQoS every publish is
// at the highest QoS. The seed and clients stay, so the same seed names
// the same script.
func Restrict(s Script, f Features) Script {
	out := Script{Seed: s.Seed, Clients: append([]Client(nil), s.Clients...)}
	top := byte(1)
	if f.QoS2 {
		top = 2
	}
	for _, st := range s.Steps {
		switch st.Op {
		case OpConnect:
			if !f.Persistent {
				st.Clean = true
			}
		case OpSubscribe, OpUnsubscribe:
			if !f.Shared && strings.HasPrefix(st.Filter, "$share/") {
				continue
			}
			st.QoS = min(st.QoS, top)
		case OpPublish:
			if !f.Retained && st.Retain {
				if st.Payload == "" {
					continue
				}
				st.Retain = false
			}
			st.QoS = min(st.QoS, top)
			if !f.PublishQoS {
				st.QoS = top
			}
		}
		out.Steps = append(out.Steps, st)
	}
	if !f.Shared {
		for i := range out.Clients {
			out.Clients[i].Group = ""
		}
	}
	return out
}
