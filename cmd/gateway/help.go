package main

// --help: the settings grouped by subject, in the order the flags_*.go
// files declare them.

import (
	"fmt"
	"io"
	"strings"
)

// helpWidth is the column --help wraps descriptions at.
const helpWidth = 80

func (r *registry) printHelp(out io.Writer) {
	fmt.Fprint(out, `Usage: gateway [flags]
       gateway --version
       gateway --healthcheck URL
       gateway check-config FILE [flags]   (as --check-config --config FILE)
       gateway --print-config [flags]

Every setting is a flag, an environment variable (SWITCHYARD_ and the flag
name in upper case with '-' as '_', e.g. SWITCHYARD_MAX_CONNECTIONS) and a
key of the YAML file named by --config or SWITCHYARD_CONFIG (the flag name,
e.g. "max-connections: 1000"). A flag beats the environment, which beats
the file, which beats the default.
`)
	for g := range numGroups {
		fmt.Fprintf(out, "\n%s\n", g.title())
		for _, s := range r.settings {
			if s.group != g {
				continue
			}
			line := "  --" + s.name
			if arg := s.value.kind().arg; arg != "" {
				line += " " + arg
			}
			fmt.Fprintln(out, line)
			text := s.usage
			if !zeroDefault(s.def) {
				def := s.def
				if k := s.value.kind().arg; k == "string" || k == "list" {
					def = fmt.Sprintf("%q", def)
				}
				// A NUL keeps "(default x)" on one line when wrapped.
				text += " (default\x00" + def + ")"
			}
			if s.live {
				text += " [reloads\x00live]"
			}
			for _, l := range wrap(text, helpWidth-8) {
				fmt.Fprintln(out, "        "+strings.ReplaceAll(l, "\x00", " "))
			}
		}
	}
}

// zeroDefault reports whether a default goes without saying.
func zeroDefault(def string) bool {
	switch def {
	case "", "0", "0s", "false", "off":
		return true
	}
	return false
}

// wrap breaks text into lines of at most width bytes at spaces (a longer
// word gets a line of its own).
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		switch {
		case line == "":
			line = w
		case len(line)+1+len(w) > width:
			lines = append(lines, line)
			line = w
		default:
			line += " " + w
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
