package router

// Last-Event-ID of a Server-Sent Event stream: where a reconnect resumes
// (see sse_resume.go), checked before the stream starts.

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/switchyard/switchyard/trie"
)

// sseResumeAt is where a reconnecting stream resumes.
type sseResumeAt struct {
	// known: positions are the stream's positions after event n;
	// otherwise the gateway no longer knows them and every pattern
	// resumes from its earliest records, not recovered.
	known     bool
	n         uint64
	epoch     string
	positions map[string][]ssePart // by pattern
}

// from returns where pattern resumes, as a subscribe's "from" with the
// epoch and positions would, or false for the stream's own "from" (a
// pattern that had delivered nothing before the drop).
func (r *sseResumeAt) from(pattern string) (fromSpec, bool) {
	switch {
	case r == nil:
		return fromSpec{}, false
	case !r.known:
		return sseResumeFrom(r.epoch, nil), true
	case len(r.positions[pattern]) > 0:
		return sseResumeFrom(r.epoch, r.positions[pattern]), true
	}
	return fromSpec{}, false
}

// sseResumePoint checks a Last-Event-ID against the bounds and the
// stream's patterns and returns where the stream resumes.
func (rt *Router) sseResumePoint(tok, epoch string, patterns []string) (*sseResumeAt, *protoError) {
	o := &rt.sse.opts
	if len(tok) > o.MaxTokenBytes {
		return nil, perr(codeBadRequest, "Last-Event-ID is longer than %d bytes", o.MaxTokenBytes)
	}
	if key, n, ok := parseSSEID(tok); ok {
		st := rt.sse.lookup(key, time.Now())
		if st == nil || st.epoch != epoch {
			return &sseResumeAt{}, nil
		}
		pos, ok := st.at(n)
		if !ok {
			return &sseResumeAt{}, nil
		}
		return &sseResumeAt{known: true, n: n, epoch: st.epoch, positions: pos}, nil
	}
	ep, pos, err := decodeSSEToken(tok, o.MaxPositions)
	if err != nil {
		return nil, perr(codeBadRequest, "Last-Event-ID is not a position token of this gateway")
	}
	count := 0
	for p, parts := range pos {
		if !slices.Contains(patterns, p) {
			return nil, perr(codeBadRequest, "Last-Event-ID names pattern %s, which the stream does not request", quoteInput(p))
		}
		count += len(parts)
	}
	if count > o.MaxPositions {
		return nil, perr(codeBadRequest, "Last-Event-ID names more than %d positions", o.MaxPositions)
	}
	// A token of the self-contained form: every pattern it names resumes
	// after its positions (from another epoch: from the earliest
	// records, as a subscribe would); ids continue from 1.
	return &sseResumeAt{known: true, epoch: ep, positions: pos}, nil
}

// decodeSSEToken decodes an id of the earlier self-contained form: base64url
// (no padding) of {"e":epoch,"s":[{"p":pattern,"o":[[topic,partition,
// offset],…]},…]}. It stops at more than maxPositions positions.
func decodeSSEToken(tok string, maxPositions int) (string, map[string][]ssePart, error) {
	js, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return "", nil, err
	}
	var raw struct {
		E *string `json:"e"`
		S []struct {
			P string               `json:"p"`
			O [][3]json.RawMessage `json:"o"`
		} `json:"s"`
	}
	if err := json.Unmarshal(js, &raw); err != nil {
		return "", nil, err
	}
	if raw.E == nil {
		return "", nil, errors.New("no epoch")
	}
	out := make(map[string][]ssePart)
	count := 0
	for _, s := range raw.S {
		if count += len(s.O); count > maxPositions {
			out[s.P] = make([]ssePart, len(s.O)) // counted and refused by the caller
			continue
		}
		for _, o := range s.O {
			var pt ssePart
			if json.Unmarshal(o[0], &pt.topic) != nil || json.Unmarshal(o[1], &pt.partition) != nil || json.Unmarshal(o[2], &pt.offset) != nil {
				return "", nil, errors.New("malformed position")
			}
			if trie.ValidateTopic(pt.topic) != nil || pt.partition < 0 || pt.offset < -1 {
				return "", nil, errors.New("position out of range")
			}
			out[s.P] = append(out[s.P], pt)
		}
	}
	return *raw.E, out, nil
}

// ssePart is one position: the last offset delivered on (topic, partition).
type ssePart struct {
	topic     string
	partition int
	offset    int64
}
