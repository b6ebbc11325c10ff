package mqtttest

import (
	"context"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestGenerate(t *testing.T) {
	a, b := Generate(7, 80), Generate(7, 80)
	if a.String() != b.String() {
		t.Fatal("the same seed gave two scripts")
	}
	if Generate(8, 80).String() == a.String() {
		t.Fatal("two seeds gave one script")
	}
	for seed := range uint64(50) {
		s := Generate(seed, 100)
		connected := make([]bool, len(s.Clients))
		ops := map[Op]int{}
		for i, st := range s.Steps {
			ops[st.Op]++
			c := s.Clients[st.Client]
			switch {
			case st.Op == OpConnect && connected[st.Client]:
				t.Fatalf("seed %d step %d: connect while connected", seed, i)
			case st.Op != OpConnect && !connected[st.Client]:
				t.Fatalf("seed %d step %d: %s while disconnected", seed, i, st)
			case st.Op == OpConnect && c.Group != "" && !st.Clean:
				t.Fatalf("seed %d step %d: a group member with a persistent session", seed, i)
			}
			connected[st.Client] = st.Op != OpDisconnect
		}
		if slices.Contains(connected, true) {
			t.Fatalf("seed %d: a client is still connected at the end", seed)
		}
		if ops[OpPublish] == 0 || ops[OpSubscribe] == 0 || ops[OpConnect] < len(s.Clients) {
			t.Fatalf("seed %d: a poor script: %v", seed, ops)
		}
	}
}

func TestMatches(t *testing.T) {
	for _, tc := range []struct {
		f, t string
		want bool
	}{
		{"t/#", "t", true}, {"t/#", "t/a/x", true}, {"t/+", "t/a/x", false}, {"t/+/x", "t/b/x", true},
		{"#", "$SYS/a", false}, {"t/a", "t/a", true}, {"t/a", "t/b", false},
	} {
		if got := Matches(tc.f, tc.t); got != tc.want {
			t.Errorf("Matches(%q, %q) = %v", tc.f, tc.t, got)
		}
	}
}

// fixture is a small script and a recording of it, written by hand so
// that each perturbation below has a known effect.
func fixture() (Script, *Recording) {
	s := Script{
		Clients: []Client{{Name: "a", Version: 5}, {Name: "b", Version: 4, Group: "g1"}, {Name: "c", Version: 5, Group: "g1"}},
		Steps: []Step{
			{Op: OpConnect, Client: 0, Clean: false},                // 0
			{Op: OpSubscribe, Client: 0, Filter: "t/+", QoS: 1},     // 1
			{Op: OpSubscribe, Client: 0, Filter: "t/#", QoS: 2},     // 2
			{Op: OpConnect, Client: 1, Clean: true},                 // 3
			{Op: OpConnect, Client: 2, Clean: true},                 // 4
			{Op: OpSubscribe, Client: 1, Filter: "$share/g1/s/#"},   // 5
			{Op: OpSubscribe, Client: 2, Filter: "$share/g1/s/#"},   // 6
			{Op: OpPublish, Client: 1, Topic: "t/a", Payload: "m1"}, // 7
			{Op: OpPublish, Client: 1, Topic: "t/b", Payload: "m2", QoS: 1},
			{Op: OpPublish, Client: 1, Topic: "t/a", Payload: "m3", QoS: 1},
			{Op: OpPublish, Client: 1, Topic: "s/a", Payload: "m4"},
			{Op: OpPublish, Client: 1, Topic: "s/b", Payload: "m5"},
			{Op: OpDisconnect, Client: 0},                                   // 12
			{Op: OpPublish, Client: 1, Topic: "t/x/y", Payload: "m6"},       // 13: QoS 0 while a is away
			{Op: OpPublish, Client: 1, Topic: "t/x", Payload: "m7", QoS: 1}, // 14
			{Op: OpConnect, Client: 0, Clean: false},                        // 15
			{Op: OpDisconnect, Client: 0},
			{Op: OpDisconnect, Client: 1},
			{Op: OpDisconnect, Client: 2},
		},
	}
	r := &Recording{Clients: [][]Connection{
		{
			{Step: 0, Granted: []byte{1, 2}, Messages: []Message{
				{Topic: "t/a", Payload: "m1", QoS: 0},
				{Topic: "t/b", Payload: "m2", QoS: 1},
				{Topic: "t/a", Payload: "m3", QoS: 1},
			}},
			{Step: 15, SessionPresent: true, Messages: []Message{
				{Topic: "t/x", Payload: "m7", QoS: 1},
			}},
		},
		{{Step: 3, Granted: []byte{0}, Messages: []Message{{Topic: "s/a", Payload: "m4"}}}},
		{{Step: 4, Granted: []byte{0}, Messages: []Message{{Topic: "s/b", Payload: "m5"}}}},
	}}
	return s, r
}

func clone(r *Recording) *Recording {
	c := &Recording{}
	for _, cs := range r.Clients {
		var out []Connection
		for _, k := range cs {
			k.Granted = slices.Clone(k.Granted)
			k.Messages = slices.Clone(k.Messages)
			out = append(out, k)
		}
		c.Clients = append(c.Clients, out)
	}
	return c
}

// TestComparePerturbations: every change MQTT does not leave open is
// reported; every change it does is tolerated under its name only.
func TestComparePerturbations(t *testing.T) {
	s, base := fixture()
	if d := Compare(s, base, clone(base), MQTTOpen...); len(d) != 0 {
		t.Fatalf("a recording differs from its copy: %v", d)
	}
	msgs := func(r *Recording, c, k int) *[]Message { return &r.Clients[c][k].Messages }
	caught := []struct {
		name    string
		perturb func(r *Recording)
	}{
		{"message lost", func(r *Recording) { m := msgs(r, 0, 0); *m = slices.Delete(*m, 1, 2) }},
		{"payload changed", func(r *Recording) { (*msgs(r, 0, 0))[0].Payload = "mX" }},
		{"QoS changed", func(r *Recording) { (*msgs(r, 0, 0))[1].QoS = 0 }},
		{"retain flag set", func(r *Recording) { (*msgs(r, 0, 0))[1].Retain = true }},
		{"order within a topic", func(r *Recording) {
			m := *msgs(r, 0, 0)
			m[0], m[2] = m[2], m[0]
		}},
		{"extra message", func(r *Recording) {
			*msgs(r, 0, 1) = append(*msgs(r, 0, 1), Message{Topic: "t/a", Payload: "m1", QoS: 0})
		}},
		{"QoS 1 lost while offline", func(r *Recording) { *msgs(r, 0, 1) = nil }},
		{"session present", func(r *Recording) { r.Clients[0][1].SessionPresent = false }},
		{"SUBACK code", func(r *Recording) { r.Clients[0][0].Granted[1] = 0x80 }},
		{"connection missing", func(r *Recording) { r.Clients[0] = r.Clients[0][:1] }},
		{"shared message lost", func(r *Recording) { *msgs(r, 2, 0) = nil }},
		{"shared message twice", func(r *Recording) { *msgs(r, 1, 0) = append(*msgs(r, 1, 0), Message{Topic: "s/b", Payload: "m5"}) }},
	}
	for _, tc := range caught {
		t.Run("caught/"+tc.name, func(t *testing.T) {
			p := clone(base)
			tc.perturb(p)
			if d := Compare(s, base, p, MQTTOpen...); len(d) == 0 {
				t.Fatal("the perturbation was not reported")
			} else {
				t.Log(d)
			}
		})
	}
	tolerated := []struct {
		name    string
		tol     Tolerance
		perturb func(r *Recording)
	}{
		{"order across topics", OrderAcrossTopics, func(r *Recording) {
			m := *msgs(r, 0, 0)
			m[0], m[1] = m[1], m[0]
		}},
		{"shared member choice", SharedMemberChoice, func(r *Recording) {
			*msgs(r, 1, 0), *msgs(r, 2, 0) = *msgs(r, 2, 0), *msgs(r, 1, 0)
		}},
		{"overlapping copies", OverlappingCopies, func(r *Recording) {
			m := msgs(r, 0, 0)
			*m = slices.Insert(*m, 3, Message{Topic: "t/a", Payload: "m3", QoS: 0})
		}},
		{"QoS 0 queued while offline", QoS0WhileOffline, func(r *Recording) {
			m := msgs(r, 0, 1)
			*m = slices.Insert(*m, 0, Message{Topic: "t/x/y", Payload: "m6", QoS: 0})
		}},
	}
	for _, tc := range tolerated {
		t.Run("tolerated/"+tc.name, func(t *testing.T) {
			p := clone(base)
			tc.perturb(p)
			if d := Compare(s, base, p, MQTTOpen...); len(d) != 0 {
				t.Fatalf("reported under every tolerance: %v", d)
			}
			var others []Tolerance
			for _, o := range MQTTOpen {
				if o != tc.tol {
					others = append(others, o)
				}
			}
			if d := Compare(s, base, p, others...); len(d) == 0 {
				t.Fatalf("not reported without tolerance %s", tc.tol)
			}
		})
	}
}

// mosquitto returns the address of the reference broker, skipping the
// test when none answers unless SWITCHYARD_REQUIRE_MOSQUITTO=1.
func mosquitto(t *testing.T) string {
	addr := os.Getenv("SWITCHYARD_MOSQUITTO_ADDR")
	if addr == "" {
		addr = "127.0.0.1:1883"
	}
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		if os.Getenv("SWITCHYARD_REQUIRE_MOSQUITTO") == "1" {
			t.Fatalf("Mosquitto at %s: %v", addr, err)
		}
		t.Skipf("no Mosquitto at %s (%v); set SWITCHYARD_REQUIRE_MOSQUITTO=1 to fail instead", addr, err)
	}
	c.Close()
	return addr
}

func count(r *Recording) (conns, msgs int) {
	for _, cs := range r.Clients {
		for _, k := range cs {
			conns++
			msgs += len(k.Messages)
		}
	}
	return conns, msgs
}

// TestMosquittoAgreesWithItself runs each script twice against Mosquitto:
// the recordings must agree under MQTTOpen, a recording with one message
// dropped must not, and nothing of the runs may be left on the broker.
func TestMosquittoAgreesWithItself(t *testing.T) {
	addr := mosquitto(t)
	steps := 120
	if testing.Short() {
		steps = 40
	}
	for _, seed := range []uint64{1, 2, 3} {
		s := Generate(seed, steps)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		a, err := Run(ctx, addr, s, Options{})
		if err != nil {
			cancel()
			t.Fatalf("seed %d: first run: %v\n%s", seed, err, s)
		}
		b, err := Run(ctx, addr, s, Options{})
		cancel()
		if err != nil {
			t.Fatalf("seed %d: second run: %v\n%s", seed, err, s)
		}
		conns, n := count(a)
		t.Logf("seed %d: %d steps, %d clients, %d connections, %d messages received", seed, len(s.Steps), len(s.Clients), conns, n)
		if d := Compare(s, a, b, MQTTOpen...); len(d) != 0 {
			t.Fatalf("seed %d: two Mosquitto runs differ:\n%v\nscript:\n%s", seed, d, s)
		}
		if n == 0 {
			t.Fatalf("seed %d: no client received anything; the comparison proves nothing", seed)
		}
		p := clone(b)
	drop:
		for _, cs := range p.Clients {
			for k := range cs {
				if len(cs[k].Messages) > 0 {
					cs[k].Messages = cs[k].Messages[1:]
					break drop
				}
			}
		}
		if d := Compare(s, a, p, MQTTOpen...); len(d) == 0 {
			t.Fatalf("seed %d: a recording with one message dropped compares equal", seed)
		}
	}
}

// TestRunLeavesNothingBehind: a run's retained messages and persistent
// sessions are gone after it.
func TestRunLeavesNothingBehind(t *testing.T) {
	addr := mosquitto(t)
	s := Script{
		Clients: []Client{{Name: "p", Version: 5}, {Name: "q", Version: 4}},
		Steps: []Step{
			{Op: OpConnect, Client: 0, Clean: false},
			{Op: OpConnect, Client: 1, Clean: false},
			{Op: OpSubscribe, Client: 1, Filter: "t/#", QoS: 1},
			{Op: OpPublish, Client: 0, Topic: "t/a", Payload: "m1", QoS: 1, Retain: true},
			{Op: OpPublish, Client: 0, Topic: "t/b", Payload: "m2", QoS: 0, Retain: true},
			{Op: OpDisconnect, Client: 0},
			{Op: OpDisconnect, Client: 1},
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const prefix = "sy-diff-cleanup-test"
	if _, err := Run(ctx, addr, s, Options{Prefix: prefix}); err != nil {
		t.Fatal(err)
	}
	check := Script{
		Clients: []Client{{Name: "p", Version: 5}, {Name: "q", Version: 4}},
		Steps: []Step{
			{Op: OpConnect, Client: 0, Clean: true},
			{Op: OpConnect, Client: 1, Clean: false},
			{Op: OpSubscribe, Client: 0, Filter: "#", QoS: 1},
			{Op: OpDisconnect, Client: 0},
			{Op: OpDisconnect, Client: 1},
		},
	}
	r, err := Run(ctx, addr, check, Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	if m := r.Clients[0][0].Messages; len(m) != 0 {
		t.Fatalf("retained messages left behind: %v", m)
	}
	if r.Clients[1][0].SessionPresent {
		t.Fatal("a persistent session was left behind")
	}
}

// overlapScript: a client of the given version with overlapping
// subscriptions at QoS 0 and 2 gets a QoS 1 message.
func overlapScript(version byte) Script {
	return Script{
		Clients: []Client{{Name: "a", Version: version}, {Name: "p", Version: 5}},
		Steps: []Step{
			{Op: OpConnect, Client: 0, Clean: true}, {Op: OpConnect, Client: 1, Clean: true},
			{Op: OpSubscribe, Client: 0, Filter: "t/+", QoS: 0},
			{Op: OpSubscribe, Client: 0, Filter: "t/#", QoS: 2},
			{Op: OpPublish, Client: 1, Topic: "t/a", Payload: "m1", QoS: 1},
			{Op: OpDisconnect, Client: 0}, {Op: OpDisconnect, Client: 1},
		},
	}
}

func overlapRecording(msgs ...Message) *Recording {
	return &Recording{Clients: [][]Connection{
		{{Step: 0, Granted: []byte{0, 2}, Messages: msgs}},
		{{Step: 1}},
	}}
}

// TestCompareMosquittoOverlapQoS: the deviation is tolerated only under
// its own name and only for a 3.1.1 client.
func TestCompareMosquittoOverlapQoS(t *testing.T) {
	spec := overlapRecording(Message{Topic: "t/a", Payload: "m1", QoS: 1})
	mosq := overlapRecording(Message{Topic: "t/a", Payload: "m1", QoS: 0})
	s4, s5 := overlapScript(4), overlapScript(5)
	if d := Compare(s4, mosq, spec, MQTTOpen...); len(d) == 0 {
		t.Fatal("a QoS 0 copy where MQTT requires QoS 1 compares equal under MQTTOpen")
	}
	if d := Compare(s4, mosq, spec, append(MQTTOpen, MosquittoOverlapQoS)...); len(d) != 0 {
		t.Fatalf("not tolerated under %s: %v", MosquittoOverlapQoS, d)
	}
	if d := Compare(s5, mosq, spec, append(MQTTOpen, MosquittoOverlapQoS)...); len(d) == 0 {
		t.Fatalf("tolerated for an MQTT 5 client under %s", MosquittoOverlapQoS)
	}
	lost := overlapRecording()
	if d := Compare(s4, mosq, lost, append(MQTTOpen, MosquittoOverlapQoS)...); len(d) == 0 {
		t.Fatal("a lost message is tolerated")
	}
}

// TestMosquittoOverlapQoS pins the reference broker's deviation behind
// MosquittoOverlapQoS: to a 3.1.1 client it sends one copy at the QoS of
// "t/+" (0), not the highest of the matching subscriptions; to an MQTT 5
// client it sends one copy per subscription, which MQTT allows.
func TestMosquittoOverlapQoS(t *testing.T) {
	addr := mosquitto(t)
	for _, tc := range []struct {
		version byte
		want    []Message
	}{
		{4, []Message{{Topic: "t/a", Payload: "m1", QoS: 0}}},
		{5, []Message{{Topic: "t/a", Payload: "m1", QoS: 0}, {Topic: "t/a", Payload: "m1", QoS: 1}}},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		r, err := Run(ctx, addr, overlapScript(tc.version), Options{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if got := r.Clients[0][0].Messages; !slices.Equal(got, tc.want) {
			t.Errorf("MQTT level %d: Mosquitto sent %v, expected %v; if it now follows MQTT, drop %s",
				tc.version, got, tc.want, MosquittoOverlapQoS)
		}
	}
}
