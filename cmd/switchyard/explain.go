package main

// Errors as the person at the keyboard reads them. The gateway's messages
// already name the offending value and the fix; explain drops the Go
// packages' prefixes ("switchyard: invalid_topic: …", "client: dial: …")
// and adds what only the command line knows: which flag or environment
// variable sets the URL, the token or the admin key.

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"

	"github.com/switchyard/switchyard/client"
	"github.com/switchyard/switchyard/internal/wire"
)

// explain returns the line printed for err after "switchyard COMMAND: ".
func (g *globals) explain(err error) string {
	var le *lineError
	if errors.As(err, &le) {
		return "line " + itoa(le.line) + ": " + g.explain(le.err)
	}
	var ce *client.Error
	var ae *apiError
	switch {
	case errors.As(err, &ce):
		return g.withHint(ce.Code, ce.Message)
	case errors.As(err, &ae) && ae.Code != "":
		return g.withHint(ae.Code, ae.Message)
	case errors.As(err, &ae):
		return "the server at " + g.url + " answered " + ae.Method + " " + ae.Path + " with HTTP " + itoa(ae.Status) +
			" and no Switchyard error: is it a Switchyard gateway? Give the gateway's address with --url or SWITCHYARD_URL"
	case errors.Is(err, client.ErrNotGateway):
		return "the server at " + g.url + " is not a Switchyard gateway: " + strings.TrimPrefix(err.Error(), client.ErrNotGateway.Error()+": ") +
			"; give the gateway's address with --url or SWITCHYARD_URL"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "cannot connect to the gateway at " + g.url + ": connection refused; is it running there? Give its address with --url or SWITCHYARD_URL"
	case isDNS(err):
		return "cannot find the host of " + g.url + " (" + stripPrefixes(err.Error()) + "); give the gateway's address with --url or SWITCHYARD_URL"
	case errors.Is(err, context.DeadlineExceeded):
		return stripPrefixes(err.Error()) + " (no answer within --timeout " + g.timeout.String() + ")"
	}
	return stripPrefixes(err.Error())
}

// withHint returns a gateway error's message with the flag that fixes it.
func (g *globals) withHint(code, msg string) string {
	if msg == "" {
		msg = strings.ReplaceAll(code, "_", " ")
	}
	// The gateway says how to send a credential over HTTP; this client
	// sends it itself, and names its flags instead.
	msg = wire.CutAuthHint(msg)
	switch code {
	case wire.CodeUnauthorized:
		if g.token == "" && g.adminKey == "" {
			return msg + ": the gateway needs a credential; give a token with --token or SWITCHYARD_TOKEN (switchyard token mints one for development), or the admin key with --admin-key or SWITCHYARD_ADMIN_KEY"
		}
		return msg + ": the gateway refused the credential; check --token (SWITCHYARD_TOKEN) or --admin-key (SWITCHYARD_ADMIN_KEY)"
	case wire.CodeForbidden:
		switch {
		case strings.Contains(msg, "admin key") && g.adminKey == "":
			return msg + ": give it with --admin-key or SWITCHYARD_ADMIN_KEY"
		case strings.HasPrefix(msg, "not allowed to") && g.adminKey == "":
			return msg + " (the token's grants do not allow this: give another with --token or SWITCHYARD_TOKEN, or the admin key with --admin-key or SWITCHYARD_ADMIN_KEY)"
		}
	case wire.CodeNotFound:
		return msg + "; is --url (SWITCHYARD_URL) the gateway's base address, such as http://127.0.0.1:8080?"
	}
	return msg
}

// stripPrefixes drops the Go packages' prefixes from an error text.
func stripPrefixes(s string) string {
	for {
		t := s
		for _, p := range []string{"switchyard: ", "client: dial: ", "client: ", "Get ", "Post ", "Delete "} {
			s = strings.TrimPrefix(s, p)
		}
		if s == t {
			return s
		}
	}
}

func isDNS(err error) bool {
	var de *net.DNSError
	return errors.As(err, &de)
}

func itoa(n int) string { return strconv.Itoa(n) }
