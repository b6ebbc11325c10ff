// Package golden reads the golden transcripts of the wire protocol in
// internal/wire/testdata, which every implementation of the frames is
// tested against: the router (which must produce them), and the Go client,
// the command-line client, the load generator and the JS client (which
// must read them). Only tests import it.
//
// # Format
//
// A transcript is a txtar archive (golang.org/x/tools/txtar). Its comment
// is free text, except lines of the form "gateway: k=v k=v" (options of
// the gateway that records and replays it, read by the router's test:
// max_subscriptions, max_message_bytes, publish_rate, publish_burst,
// strict, max_messages, and auth=P: tokens are checked, and a session
// without one may subscribe to P.# only) and "session NAME: QUERY" (the query string a
// session connects with, for example envelope=lean).
//
// The file "transcript" holds one step a line; blank lines and lines
// starting with '#' are skipped:
//
//	a> {"op":"subscribe","id":1,"pattern":"orders.*"}    session a sends a frame
//	a< {"op":"subscribed","id":1,"pattern":"orders.*"}   session a receives a frame
//
// A session is a WebSocket connection, opened at its first step (its
// welcome frame is not part of the transcript). The frames a session
// receives are listed in the order it receives them, byte for byte, one
// line per frame (a WebSocket message holding several newline-separated
// frames counts as several). After the last step, every session must
// receive nothing else before the reply to a ping.
//
// The file "frames" holds server frames alone, one a line, that the
// router's encoders produce directly (internal/wire checks them); readers
// decode them like the frames of a transcript.
//
// What varies between runs is written as a variable, substituted by the
// runner: $EPOCH is the gateway's log epoch (in frames sent and received),
// $SESSION_a is session a's id. Times are not variable: the recording
// gateway's engine runs on a fake clock reading Time.
package golden

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"time"

	"golang.org/x/tools/txtar"
)

// Time is the fake clock's reading while a transcript is recorded: the
// "time" of every message frame.
var Time = time.Date(2026, 11, 29, 8, 0, 0, 123e6, time.UTC)

// Step is one line of a transcript.
type Step struct {
	Session string // the session's name, such as "a"
	Send    bool   // a client frame (>) or a server frame (<)
	Frame   string // the frame as written, variables unsubstituted
	Line    int    // the line in the file, from 1
}

// Transcript is one golden file.
type Transcript struct {
	Name    string            // file name without .txtar
	Path    string            // the file
	Gateway map[string]string // "gateway:" options
	Query   map[string]string // "session NAME:" queries
	Steps   []Step            // from the transcript file
	Frames  []Step            // from the frames file (Session "", Send false)
}

// Received returns every server frame of t, transcript and frames files.
func (t *Transcript) Received() []Step {
	var out []Step
	for _, s := range t.Steps {
		if !s.Send {
			out = append(out, s)
		}
	}
	return append(out, t.Frames...)
}

// Dir is the testdata directory holding the transcripts.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata")
}

// Load reads every *.txtar of Dir, sorted by name.
func Load() ([]*Transcript, error) {
	paths, err := filepath.Glob(filepath.Join(Dir(), "*.txtar"))
	if err != nil {
		return nil, err
	}
	sort.Strings(paths)
	var out []*Transcript
	for _, p := range paths {
		t, err := Parse(p)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("golden: no transcripts in %s", Dir())
	}
	return out, nil
}

// Parse reads one transcript.
func Parse(path string) (*Transcript, error) {
	ar, err := txtar.ParseFile(path)
	if err != nil {
		return nil, err
	}
	t := &Transcript{
		Name: strings.TrimSuffix(filepath.Base(path), ".txtar"), Path: path,
		Gateway: map[string]string{}, Query: map[string]string{},
	}
	sc := bufio.NewScanner(strings.NewReader(string(ar.Comment)))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "gateway:"); ok {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				t.Gateway[k] = v
			}
		}
		if rest, ok := strings.CutPrefix(line, "session "); ok {
			name, q, ok := strings.Cut(rest, ":")
			if !ok {
				return nil, fmt.Errorf("%s: bad session line %q", path, line)
			}
			t.Query[strings.TrimSpace(name)] = strings.TrimSpace(q)
		}
	}
	// Line numbers: the comment, then each file's header and data.
	line := strings.Count(string(ar.Comment), "\n")
	for _, f := range ar.Files {
		line++ // the -- name -- line
		switch f.Name {
		case "transcript", "frames":
		default:
			return nil, fmt.Errorf("%s: unknown file %q", path, f.Name)
		}
		for i, l := range strings.Split(strings.TrimSuffix(string(f.Data), "\n"), "\n") {
			n := line + 1 + i
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			if f.Name == "frames" {
				t.Frames = append(t.Frames, Step{Frame: l, Line: n})
				continue
			}
			head, frame, ok := strings.Cut(l, " ")
			if !ok || len(head) < 2 || (head[len(head)-1] != '>' && head[len(head)-1] != '<') {
				return nil, fmt.Errorf("%s:%d: want \"NAME> frame\" or \"NAME< frame\"", path, n)
			}
			t.Steps = append(t.Steps, Step{Session: head[:len(head)-1], Send: head[len(head)-1] == '>', Frame: frame, Line: n})
		}
		line += strings.Count(string(f.Data), "\n")
	}
	return t, nil
}

// Rewrite replaces the frame of the step at line in path with frame; the
// router's test uses it to record a transcript (-update).
func Rewrite(path string, line int, frame string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	lines := strings.Split(string(b), "\n")
	head, _, _ := strings.Cut(lines[line-1], " ")
	lines[line-1] = head + " " + frame
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")), 0o644)
}
