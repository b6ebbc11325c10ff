package main

// The settings registry. Every gateway setting is declared once, in the
// flags_*.go file of its subject, by one call that binds it to the field of
// the option struct it configures (router.Options, session.Options,
// engine.GroupPolicy, …) with its default taken from the owning package's
// Default* constant, as nats-server binds its flags to its Options. From
// that one declaration come the flag, the environment variable, the key of
// the config file, the grouped --help, the source of each value (for
// --print-config and reload) and the defaults test.
//
// Adding a setting: one line in the flags_*.go file of its subject, e.g.
//
//	r.int(&c.Router.Groups.MaxGroups, "max-groups", router.DefaultMaxGroups, "consumer groups …")
//
// and, when its default lives in a package, a one-line Default* constant
// there; then a row in TestFlagDefaults' table of expected constants (the
// test fails, naming the setting, until it has one).

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// A group is the subject of a setting, the heading it is listed under in
// --help.
type group int

const (
	groupServer group = iota
	groupTLS
	groupEngine
	groupAuth
	groupHooks
	groupLimits
	groupGroups
	groupRetention
	groupObservability
	groupMQTT
	numGroups
)

// title is the group's heading in --help.
func (g group) title() string {
	switch g {
	case groupServer:
		return "Server: the listener, HTTP timeouts, browsers and shutdown"
	case groupTLS:
		return "TLS: https and wss on the listener"
	case groupEngine:
		return "Engine: where the log lives"
	case groupAuth:
		return "Auth: tokens, keys and anonymous access"
	case groupHooks:
		return "Hooks: the application's authorization hooks"
	case groupLimits:
		return "Limits: what one client, session or request may make the gateway hold or do"
	case groupGroups:
		return "Groups: consumer groups, redelivery and dead letters"
	case groupRetention:
		return "Retention: defaults of auto-created topics"
	case groupObservability:
		return "Observability: logs, system topics and profiles"
	case groupMQTT:
		return "MQTT: the MQTT 3.1.1 and 5.0 transport"
	}
	return "Other"
}

// A source says where a setting's value came from.
type source string

const (
	fromDefault source = "default"
	fromFile    source = "file"
	fromEnv     source = "env"
	fromFlag    source = "flag"
)

// A setting is one gateway setting: the flag --name, the environment
// variable SWITCHYARD_NAME and the key name of the config file.
type setting struct {
	name  string
	group group
	usage string
	value value
	def   string // the default as text, as --help shows it
	reset func() // stores the default in the bound field
	// secret: the value is key material, never shown (--print-config).
	secret bool
	// action: a switch asking for something other than serving
	// (--version, --check-config), given on the command line only.
	action bool
	// live: a reload may change the setting in a running gateway
	// (liveNames, reload.go); other changes are refused.
	live bool
}

// A value is a setting's flag.Value, bound to its field.
type value interface {
	flag.Getter
	// kind names what the setting takes, for --help and error messages.
	kind() kind
}

// A kind describes the values of a setting's type.
type kind struct {
	arg  string // the placeholder --help shows after the flag ("" for a switch)
	want string // what an error message says was expected
}

// registry is every setting of a config, in declaration order.
type registry struct {
	settings []*setting
	byName   map[string]*setting
	group    group        // of the settings being declared
	topics   *[]topicSpec // the config's topics list, set by the file only
}

// newRegistry declares every setting bound to c's fields. It does not
// touch c: setDefaults stores the defaults.
func newRegistry(c *config) *registry {
	r := &registry{byName: map[string]*setting{}, topics: &c.TopicList}
	for _, declare := range []func(*registry){
		c.serverFlags, c.tlsFlags, c.engineFlags, c.authFlags, c.hookFlags,
		c.limitFlags, c.groupFlags, c.retentionFlags, c.observabilityFlags,
		c.mqttFlags,
	} {
		declare(r)
	}
	for _, name := range liveNames {
		r.byName[name].live = true // a name not declared panics in every test
	}
	return r
}

// in makes the settings declared next belong to g.
func (r *registry) in(g group) *registry {
	r.group = g
	return r
}

// setDefaults stores every setting's default in its field.
func (r *registry) setDefaults() {
	for _, s := range r.settings {
		s.reset()
	}
}

// flagSet returns a flag set of the settings, whose usage is the grouped
// help.
func (r *registry) flagSet(out io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(out)
	for _, s := range r.settings {
		fs.Var(s.value, s.name, s.usage)
	}
	fs.Usage = func() { r.printHelp(fs.Output()) }
	return fs
}

// envName is the environment variable of a setting.
func envName(name string) string {
	return "SWITCHYARD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
}

// bind declares a setting of type T bound to p.
func bind[T any](r *registry, p *T, name string, def T, usage string, k kind, parse func(string) (T, error), show func(T) string) {
	if r.byName[name] != nil {
		panic("gateway: setting " + name + " declared twice")
	}
	v := &typed[T]{p: p, k: k, parse: parse, show: show}
	s := &setting{name: name, group: r.group, usage: usage, value: v, def: show(def), reset: func() { *p = def }}
	r.settings = append(r.settings, s)
	r.byName[name] = s
}

func (r *registry) int(p *int, name string, def int, usage string) {
	bind(r, p, name, def, usage, kind{"int", "an integer"},
		func(s string) (int, error) { v, err := strconv.ParseInt(s, 0, strconv.IntSize); return int(v), err }, strconv.Itoa)
}

func (r *registry) int64(p *int64, name string, def int64, usage string) {
	bind(r, p, name, def, usage, kind{"int", "an integer"},
		func(s string) (int64, error) { return strconv.ParseInt(s, 0, 64) },
		func(v int64) string { return strconv.FormatInt(v, 10) })
}

func (r *registry) float(p *float64, name string, def float64, usage string) {
	bind(r, p, name, def, usage, kind{"float", "a number"},
		func(s string) (float64, error) { return strconv.ParseFloat(s, 64) },
		func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) })
}

func (r *registry) duration(p *time.Duration, name string, def time.Duration, usage string) {
	bind(r, p, name, def, usage, kind{"duration", "a duration such as 500ms, 10s or 1m30s"},
		time.ParseDuration, time.Duration.String)
}

func (r *registry) bool(p *bool, name string, def bool, usage string) {
	bind(r, p, name, def, usage, kind{"", "true or false"}, strconv.ParseBool, strconv.FormatBool)
}

func (r *registry) string(p *string, name string, def string, usage string) {
	bind(r, p, name, def, usage, kind{"string", "a string"},
		func(s string) (string, error) { return s, nil }, func(v string) string { return v })
}

// secret is a string setting holding key material, which --print-config
// does not show.
func (r *registry) secret(p *string, name string, usage string) {
	r.string(p, name, "", usage)
	r.byName[name].secret = true
}

// action is a switch asking the gateway to do something other than serve
// (print its version, check its config); it is taken from the command line
// only, never from the environment or the file.
func (r *registry) action(p *bool, name string, usage string) {
	r.bool(p, name, false, usage)
	r.byName[name].action = true
}

// list is a comma-separated list; blanks are dropped.
func (r *registry) list(p *[]string, name string, def []string, usage string) {
	bind(r, p, name, def, usage, kind{"list", "a comma-separated list"},
		func(s string) ([]string, error) { return splitList(s), nil },
		func(v []string) string { return strings.Join(v, ",") })
}

// onOff is a switch written "off" or "on".
func (r *registry) onOff(p *bool, name string, def bool, usage string) {
	bind(r, p, name, def, usage, kind{"off|on", `"off" or "on"`},
		func(s string) (bool, error) {
			switch s {
			case "on":
				return true, nil
			case "off":
				return false, nil
			}
			return false, errors.New("neither off nor on")
		},
		func(v bool) string {
			if v {
				return "on"
			}
			return "off"
		})
}

// cidrs is a comma-separated list of networks.
func (r *registry) cidrs(p *[]*net.IPNet, name string, def []*net.IPNet, usage string) {
	bind(r, p, name, def, usage, kind{"list", "comma-separated CIDRs such as 10.0.0.0/8"},
		func(s string) ([]*net.IPNet, error) {
			var out []*net.IPNet
			for _, c := range splitList(s) {
				_, n, err := net.ParseCIDR(c)
				if err != nil {
					return nil, err
				}
				out = append(out, n)
			}
			return out, nil
		},
		func(v []*net.IPNet) string {
			s := make([]string, len(v))
			for i, n := range v {
				s[i] = n.String()
			}
			return strings.Join(s, ",")
		})
}

// typed is the value of a setting of type T.
type typed[T any] struct {
	p     *T
	k     kind
	parse func(string) (T, error)
	show  func(T) string
}

func (v *typed[T]) Set(s string) error {
	x, err := v.parse(s)
	if errors.Is(err, strconv.ErrRange) {
		return fmt.Errorf("out of range: expected %s that fits", v.k.want)
	}
	if err != nil {
		return fmt.Errorf("expected %s", v.k.want)
	}
	*v.p = x
	return nil
}

func (v *typed[T]) String() string {
	if v == nil || v.p == nil {
		return ""
	}
	return v.show(*v.p)
}

func (v *typed[T]) Get() any { return *v.p }

func (v *typed[T]) kind() kind { return v.k }

// IsBoolFlag lets a switch be given without a value (--log-json).
func (v *typed[T]) IsBoolFlag() bool {
	_, ok := any(v.p).(*bool)
	return ok && v.k.arg == ""
}
