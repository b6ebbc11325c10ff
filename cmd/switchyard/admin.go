package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
)

// topic is the HTTP API's topic object, as much of it as the CLI prints.
type topic struct {
	Name        string `json:"name"`
	Partitions  int    `json:"partitions"`
	OnFull      string `json:"on_full"`
	Partitioner string `json:"partitioner"`
	Policy      string `json:"policy"` // the topic policy whose settings it has, if any
	Retention   struct {
		MaxMessages int64   `json:"max_messages"`
		MaxAge      *string `json:"max_age"`
	} `json:"retention"`
	Offsets []struct {
		Partition int   `json:"partition"`
		Earliest  int64 `json:"earliest"`
		Next      int64 `json:"next"`
		Bytes     int64 `json:"bytes"`
	} `json:"offsets"`
}

func (t topic) records() (n int64) {
	for _, o := range t.Offsets {
		n += o.Next - o.Earliest
	}
	return n
}

func (t topic) retention() string {
	s := fmt.Sprintf("%d records", t.Retention.MaxMessages)
	if t.Retention.MaxAge != nil && *t.Retention.MaxAge != "" {
		s += ", " + *t.Retention.MaxAge
	}
	return s
}

// raw holds a reply both decoded (for readable output) and as it came
// (for JSON output, so no field the gateway adds is lost).
type raw[T any] struct {
	v   T
	raw json.RawMessage
}

func (r *raw[T]) UnmarshalJSON(b []byte) error {
	r.raw = append(json.RawMessage(nil), b...)
	return json.Unmarshal(b, &r.v)
}

func (g *globals) table(header string, rows func(w *tabwriter.Writer)) {
	w := tabwriter.NewWriter(g.env.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, header)
	rows(w)
	w.Flush()
}

func runTopics(ctx context.Context, g *globals, args []string) error {
	if _, err := parse(g.flagSet("topics"), args, 0); err != nil {
		return err
	}
	topics, err := listInto[topic](ctx, g, "/v1/topics", "topics", nil)
	if err != nil {
		return err
	}
	return printList(g, topics, "TOPIC\tPARTITIONS\tRECORDS\tON_FULL\tRETENTION", func(w io.Writer, t topic) {
		fmt.Fprintf(w, "%s\t%d\t%d\t%s\t%s\n", t.Name, t.Partitions, t.records(), t.OnFull, t.retention())
	})
}

// printList prints the items of a listing: each as it came, one JSON
// object a line, with --json; else a table under header, a row each.
func printList[T any](g *globals, items []raw[T], header string, row func(w io.Writer, v T)) error {
	if g.jsonOut() {
		for _, it := range items {
			if err := g.emit(it.raw); err != nil {
				return err
			}
		}
		return nil
	}
	g.table(header, func(w *tabwriter.Writer) {
		for _, it := range items {
			row(w, it.v)
		}
	})
	return nil
}

func runTopic(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("topic")
	partitions := fs.Int("partitions", 0, "create: partitions (default: the gateway's)")
	maxMessages := fs.Int64("max-messages", 0, "create: records kept per partition (default: the gateway's)")
	maxAge := fs.String("max-age", "", `create: maximum record age, e.g. "24h" (default: the gateway's)`)
	onFull := fs.String("on-full", "", "create: block or drop_oldest (default: the gateway's)")
	partitioner := fs.String("partitioner", "", "create: key_hash, round_robin or sticky (default: key_hash)")
	yes := fs.Bool("yes", false, "delete: do not ask for confirmation")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("topic needs create, delete or show and a NAME")
	}
	name := pos[1]
	path := "/v1/topics/" + url.PathEscape(name)
	var t raw[topic]
	switch pos[0] {
	case "create":
		body := map[string]any{"name": name}
		if *partitions > 0 {
			body["partitions"] = *partitions
		}
		ret := map[string]any{}
		if *maxMessages > 0 {
			ret["max_messages"] = *maxMessages
		}
		if *maxAge != "" {
			ret["max_age"] = *maxAge
		}
		if len(ret) > 0 {
			body["retention"] = ret
		}
		if *onFull != "" {
			body["on_full"] = *onFull
		}
		if *partitioner != "" {
			body["partitioner"] = *partitioner
		}
		if err := g.call(ctx, "POST", "/v1/topics", nil, body, &t); err != nil {
			return err
		}
	case "show":
		if err := g.call(ctx, "GET", path, nil, nil, &t); err != nil {
			return err
		}
	case "delete":
		return deleteConfirmed(ctx, g, *yes, "topic", name, "every record it holds", path)
	default:
		return usagef("unknown topic subcommand %q", pos[0])
	}
	if g.jsonOut() {
		return g.emit(t.raw)
	}
	v := t.v
	if pos[0] == "create" {
		g.printf("created topic %s\n", v.Name)
	}
	g.printf("name:        %s\npartitions:  %d\nretention:   %s\non_full:     %s\npartitioner: %s\n", v.Name, v.Partitions, v.retention(), v.OnFull, v.Partitioner)
	if v.Policy != "" {
		g.printf("policy:      %s\n", v.Policy)
	}
	g.table("PARTITION\tEARLIEST\tNEXT\tBYTES", func(w *tabwriter.Writer) {
		for _, o := range v.Offsets {
			fmt.Fprintf(w, "%d\t%d\t%d\t%d\n", o.Partition, o.Earliest, o.Next, o.Bytes)
		}
	})
	return nil
}

// deleteConfirmed deletes the kind (topic, group) called name at path,
// after asking on the terminal unless yes; what says what goes with it.
func deleteConfirmed(ctx context.Context, g *globals, yes bool, kind, name, what, path string) error {
	if !yes {
		if err := confirm(g, fmt.Sprintf("Delete %s %s and %s?", kind, name, what),
			fmt.Sprintf("%s delete removes %s and %s; add --yes to do so without a terminal to confirm on", kind, name, what),
			kind+" delete cancelled; nothing was deleted"); err != nil {
			return err
		}
	}
	if err := g.call(ctx, "DELETE", path, nil, nil, nil); err != nil {
		return err
	}
	if g.jsonOut() {
		return g.emit(map[string]any{"deleted": name})
	}
	g.printf("deleted %s %s\n", kind, name)
	return nil
}

// group is the HTTP API's group object, as much of it as the CLI prints.
type group struct {
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
	Members []struct {
		ID string `json:"id"`
	} `json:"members"`
	Partitions []struct {
		Topic     string `json:"topic"`
		Partition int    `json:"partition"`
		Member    string `json:"member"`
		Committed int64  `json:"committed"`
		Next      int64  `json:"next"`
		Lag       int64  `json:"lag"`
	} `json:"partitions"`
	Lag int64 `json:"lag"`
}

func runGroups(ctx context.Context, g *globals, args []string) error {
	if _, err := parse(g.flagSet("groups"), args, 0); err != nil {
		return err
	}
	groups, err := listInto[group](ctx, g, "/v1/groups", "groups", nil)
	if err != nil {
		return err
	}
	return printList(g, groups, "GROUP\tPATTERN\tMEMBERS\tLAG", func(w io.Writer, gr group) {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\n", gr.Name, gr.Pattern, len(gr.Members), gr.Lag)
	})
}

func runGroup(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("group")
	topicName := fs.String("topic", "", "seek: the topic")
	partition := fs.Int("partition", -1, "seek: the partition (default: every partition)")
	offset := fs.Int64("offset", -1, "seek: the offset to replay from")
	at := fs.String("time", "", "seek: replay from the first record at or after this RFC 3339 time")
	yes := fs.Bool("yes", false, "delete: do not ask for confirmation")
	pos, err := parse(fs, args, 2)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("group needs show, seek or delete and a GROUP")
	}
	name := pos[1]
	path := "/v1/groups/" + url.PathEscape(name)
	switch pos[0] {
	case "show":
		var gr raw[group]
		if err := g.call(ctx, "GET", path, nil, nil, &gr); err != nil {
			return err
		}
		if g.jsonOut() {
			return g.emit(gr.raw)
		}
		v := gr.v
		ids := make([]string, 0, len(v.Members))
		for _, m := range v.Members {
			ids = append(ids, m.ID)
		}
		g.printf("group:   %s\npattern: %s\nmembers: %d %s\nlag:     %d\n", v.Name, v.Pattern, len(ids), strings.Join(ids, " "), v.Lag)
		g.table("TOPIC\tPARTITION\tMEMBER\tCOMMITTED\tNEXT\tLAG", func(w *tabwriter.Writer) {
			for _, p := range v.Partitions {
				member := p.Member
				if member == "" {
					member = "-"
				}
				fmt.Fprintf(w, "%s\t%d\t%s\t%d\t%d\t%d\n", p.Topic, p.Partition, member, p.Committed, p.Next, p.Lag)
			}
		})
		return nil
	case "seek":
		if *topicName == "" {
			return usagef("seek needs --topic")
		}
		if (*offset >= 0) == (*at != "") {
			return usagef("seek needs --offset or --time, not both")
		}
		body := map[string]any{"topic": *topicName}
		if *partition >= 0 {
			body["partition"] = *partition
		}
		if *offset >= 0 {
			body["offset"] = *offset
		} else {
			body["time"] = *at
		}
		if err := g.call(ctx, "POST", path+"/seek", nil, body, nil); err != nil {
			return err
		}
		if g.jsonOut() {
			return g.emit(map[string]any{"group": name, "seek": body})
		}
		g.printf("group %s replays %s from %v\n", name, *topicName, body[map[bool]string{true: "offset", false: "time"}[*offset >= 0]])
		return nil
	case "delete":
		return deleteConfirmed(ctx, g, *yes, "group", name, "its committed positions", path)
	}
	return usagef("unknown group subcommand %q", pos[0])
}

// deadLetter is the HTTP API's dead letter, as much of it as the CLI prints.
type deadLetter struct {
	ID        string          `json:"id"`
	Reason    string          `json:"reason"`
	Group     string          `json:"group"`
	Topic     string          `json:"topic"`
	Partition int             `json:"partition"`
	Offset    int64           `json:"offset"`
	Attempts  int             `json:"attempts"`
	Error     string          `json:"error"`
	Time      string          `json:"time"`
	Data      json.RawMessage `json:"data"`
}

func runDeadLetters(ctx context.Context, g *globals, args []string) error {
	fs := g.flagSet("deadletters")
	groupName := fs.String("group", "", "only this group's dead letters")
	reason := fs.String("reason", "", "only this reason: max_attempts or queue_full")
	redrive := fs.Bool("redrive", false, "hand the listed dead letters back: each to its group only, at its own offset (one request per group)")
	var ids stringList
	fs.Var(&ids, "id", "with --redrive: only this dead letter (repeatable)")
	appendToTopics := fs.Bool("append-to-topics", false, "with --redrive: append letters that cannot go back to their group (queue_full ones, records trimmed by retention) to their topics again, where every subscriber sees them")
	yes := fs.Bool("yes", false, "with --redrive: do not ask before redriving every dead letter")
	if _, err := parse(fs, args, 0); err != nil {
		return err
	}
	q := url.Values{}
	if *groupName != "" {
		q.Set("group", *groupName)
	}
	if *reason != "" {
		q.Set("reason", *reason)
	}
	var reply struct{ DeadLetters []raw[deadLetter] }
	var err error
	if reply.DeadLetters, err = listInto[deadLetter](ctx, g, "/v1/deadletters", "deadletters", q); err != nil {
		return err
	}
	if !*redrive {
		return printList(g, reply.DeadLetters, "ID\tREASON\tGROUP\tTOPIC\tPARTITION\tOFFSET\tATTEMPTS\tERROR", func(w io.Writer, d deadLetter) {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\n", d.ID, d.Reason, dash(d.Group), d.Topic, d.Partition, d.Offset, d.Attempts, dash(d.Error))
		})
	}
	// The API redrives per group: gather the chosen ids of each group.
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	byGroup := map[string][]string{}
	for _, r := range reply.DeadLetters {
		d := r.v
		if len(ids) > 0 && !want[d.ID] {
			continue
		}
		delete(want, d.ID)
		byGroup[d.Group] = append(byGroup[d.Group], d.ID)
	}
	if len(want) > 0 {
		missing := make([]string, 0, len(want))
		for id := range want {
			missing = append(missing, id)
		}
		sort.Strings(missing)
		return fmt.Errorf("no such dead letter: %s", strings.Join(missing, ", "))
	}
	groups := make([]string, 0, len(byGroup))
	chosen := 0
	for gr, l := range byGroup {
		groups = append(groups, gr)
		chosen += len(l)
	}
	sort.Strings(groups)
	if *groupName == "" && *reason == "" && len(ids) == 0 && chosen > 0 && !*yes {
		if err := confirmRedriveAll(g, chosen, len(groups), *appendToTopics); err != nil {
			return err
		}
	}
	total := 0
	for _, gr := range groups {
		// The gateway takes at most redriveBatch ids per request.
		for chunk := range slices.Chunk(byGroup[gr], redriveBatch) {
			var res struct {
				Redriven int `json:"redriven"`
			}
			body := map[string]any{"ids": chunk}
			if gr != "" {
				body["group"] = gr
			}
			if *appendToTopics {
				body["append_to_topics"] = true
			}
			if err := g.call(ctx, "POST", "/v1/deadletters/redrive", nil, body, &res); err != nil {
				if gr == "" {
					return fmt.Errorf("redrive the letters without a group (redriven %d before): %w", total, err)
				}
				return fmt.Errorf("redrive group %q (redriven %d before): %w", gr, total, err)
			}
			total += res.Redriven
		}
	}
	if g.jsonOut() {
		return g.emit(map[string]int{"redriven": total})
	}
	g.printf("redriven %d dead letters\n", total)
	if left := chosen - total; left > 0 {
		if *appendToTopics {
			fmt.Fprintf(g.env.stderr, "%d dead letters were left: redriven meanwhile by someone else, or could not be appended\n", left)
		} else {
			fmt.Fprintf(g.env.stderr, "%d dead letters were left: they have no group (queue_full), their group is gone or retention trimmed their record; --append-to-topics appends them to their topics again\n", left)
		}
	}
	return nil
}

// redriveBatch is the most ids the gateway takes in one redrive request
// (router.MaxRedriveIDs).
const redriveBatch = 1000

// confirmRedriveAll asks on the terminal before a redrive of every dead
// letter; without a terminal it refuses: --yes says so on the command line.
func confirmRedriveAll(g *globals, letters, groups int, appendToTopics bool) error {
	what := "to their groups"
	if appendToTopics {
		what = "to their groups (and append those that cannot go back to their topics)"
	}
	return confirm(g,
		fmt.Sprintf("Redrive all %d dead letters of %d groups %s?", letters, groups, what),
		fmt.Sprintf("--redrive without --group, --reason or --id redrives all %d dead letters; add --yes to do so without a terminal to confirm on", letters),
		"redrive cancelled; nothing was redriven")
}

// confirm asks question on the terminal and returns nil on "y" or "yes".
// Without a terminal on stdin it returns the usage error noTTY (which
// names --yes); on any other answer, the error cancelled.
func confirm(g *globals, question, noTTY, cancelled string) error {
	if !g.env.ttyIn {
		return usagef("%s", noTTY)
	}
	fmt.Fprintf(g.env.stderr, "%s [y/N] ", question)
	answer, _ := bufio.NewReader(g.env.stdin).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(answer)) {
	case "y", "yes":
		return nil
	}
	return errors.New(cancelled)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// version is set at build time with
// -ldflags "-X main.version=v1.2.3"; without it, the module version from
// the build information is used.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "(devel)"
}

func runVersion(ctx context.Context, g *globals, args []string) error {
	if _, err := parse(g.flagSet("version"), args, 0); err != nil {
		return err
	}
	if g.jsonOut() {
		return g.emit(map[string]string{"version": buildVersion()})
	}
	g.printf("switchyard %s\n", buildVersion())
	return nil
}
